"""A number a job writes into one of its outputs, named `FILE:KEY` (e.g.
`final_metrics.json:val_loss`): the sweep table's metric column and an Optuna trial's
objective. Read from the landed outputs, never from the node."""

from __future__ import annotations

import json
import math
import posixpath
from dataclasses import dataclass
from pathlib import Path

from engine.jobs.fileerror import shown


@dataclass(frozen=True)
class Metric:
    file: str  # relative to the run's outputs dir
    key: str  # a JSON key; dots reach into nested objects (`eval.loss`)

    @classmethod
    def parse(cls, text: str) -> Metric:
        """`FILE:KEY`; ValueError (one line) for anything that could leave the outputs dir."""
        file, sep, key = text.rpartition(":")
        if not sep or not file or not key:
            raise ValueError(f"metric {shown(text)!r}: expected FILE:KEY")
        norm = posixpath.normpath(file)
        if file.startswith("/") or norm.startswith("../") or norm == "..":
            raise ValueError(f"metric {shown(text)!r}: FILE must lie inside the outputs")
        return cls(norm, key)

    def __str__(self) -> str:
        return f"{self.file}:{self.key}"

    def read(self, outputs_dir: Path) -> tuple[float | None, str | None]:
        """(the value, None), or (None, why there is none) in one line."""
        path = outputs_dir / self.file
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None, f"{self.file} not in the outputs"
        except (OSError, ValueError) as exc:
            return None, f"{self.file}: unreadable: {shown(str(exc))}"
        for part in self.key.split("."):
            if not isinstance(data, dict) or part not in data:
                return None, f"{self.file}: no key {shown(self.key)!r}"
            data = data[part]
        if isinstance(data, bool) or not isinstance(data, int | float) or not math.isfinite(data):
            return None, f"{self}: not a finite number"
        return float(data), None
