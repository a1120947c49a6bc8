"""A tiny real objective: a one-hidden-layer MLP (numpy only) fitting y = sin(3x) + noise.

Its validation loss depends on the learning rate and the hidden width, as a real model's
does: too small a rate learns little, too large diverges, too narrow underfits.
"""

from __future__ import annotations

import json
import os

import numpy as np

LR = float(os.environ.get("LR", "0.05"))
WIDTH = int(os.environ.get("WIDTH", "16"))
STEPS = 400

rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (256, 1))
y = np.sin(3 * x) + rng.normal(0, 0.05, x.shape)
x_val = np.linspace(-1, 1, 64).reshape(-1, 1)
y_val = np.sin(3 * x_val)

w1 = rng.normal(0, 1, (1, WIDTH))
b1 = np.zeros(WIDTH)
w2 = rng.normal(0, 1 / np.sqrt(WIDTH), (WIDTH, 1))
b2 = np.zeros(1)


def forward(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hidden = np.tanh(inputs @ w1 + b1)
    return hidden, hidden @ w2 + b2


def val_loss() -> float:
    loss = float(np.mean((forward(x_val)[1] - y_val) ** 2))
    return loss if np.isfinite(loss) else 1e9


for step in range(1, STEPS + 1):
    hidden, out = forward(x)
    grad_out = 2 * (out - y) / len(x)
    grad_hidden = (grad_out @ w2.T) * (1 - hidden**2)
    w2 -= LR * hidden.T @ grad_out
    b2 -= LR * grad_out.sum(0)
    w1 -= LR * x.T @ grad_hidden
    b1 -= LR * grad_hidden.sum(0)
    if step % 50 == 0:
        print(f"optuna-report {step} {val_loss():.6f}", flush=True)

with open("final_metrics.json", "w") as f:
    json.dump({"val_loss": val_loss(), "lr": LR, "width": WIDTH}, f)
print("done")
