"""A tiny training loop with no dependencies: fits y = 3x + 1 by gradient descent.

Writes what a real training job writes — per-epoch metrics (JSONL), final metrics
(JSON) and a checkpoint — so the example exercises outputs, logs and redaction.
"""

import argparse
import json
import os
import pickle
import random
import sys
from pathlib import Path


def load(path: Path) -> list[tuple[float, float]]:
    rows = [line.split(",") for line in path.read_text().splitlines()[1:] if line]
    return [(float(x), float(y)) for x, y in rows]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    random.seed(int(os.environ.get("SEED", "0")))
    print(f"logging in with key {os.environ.get('WANDB_API_KEY', '')}")  # redacted by swjob
    data = load(Path("data/points.csv"))
    w, b, lr = random.random(), 0.0, 0.2
    Path("checkpoints").mkdir(exist_ok=True)
    with open("metrics.jsonl", "w") as metrics:
        for epoch in range(1, args.epochs + 1):
            gw = sum(2 * (w * x + b - y) * x for x, y in data) / len(data)
            gb = sum(2 * (w * x + b - y) for x, y in data) / len(data)
            w, b = w - lr * gw, b - lr * gb
            loss = sum((w * x + b - y) ** 2 for x, y in data) / len(data)
            metrics.write(json.dumps({"epoch": epoch, "loss": round(loss, 6)}) + "\n")
            print(f"epoch {epoch:3d} loss {loss:.5f}", flush=True)
            if loss > 1e6:
                print("diverged", file=sys.stderr)
                sys.exit(2)
    Path("checkpoints/ckpt_latest.pt").write_bytes(pickle.dumps({"w": w, "b": b}))
    Path("final_metrics.json").write_text(json.dumps({"w": w, "b": b, "loss": loss}, indent=2))
    print(f"done: w={w:.3f} b={b:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
