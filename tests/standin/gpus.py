"""A host's GPUs as a container on it sees them: the `nvidia-smi` the NVIDIA container
runtime puts in every GPU container, answering `--query-gpu=…` for the host's boards.

The stand-ins write one into each instance's programs, for as many GPUs as the host
shows (by default the offer's; `Faults.gpus_shown` plays a host whose GPUs went missing).
A host that shows none answers as the real tool does: "No devices were found", exit 6.
Utilisation reads 0 %: nothing runs on these boards. Only shell builtins: a bare image
has no other tools.
"""

from __future__ import annotations

import shlex
from pathlib import Path

DRIVER = "550.54.15"

_SCRIPT = """#!/bin/sh
query=""
for arg in "$@"; do
  case "$arg" in --query-gpu=*) query="${{arg#--query-gpu=}}";; esac
done
if [ {count} -eq 0 ]; then echo "No devices were found"; exit 6; fi
[ -n "$query" ] || {{ echo "stand-in nvidia-smi: only --query-gpu is played" >&2; exit 2; }}
IFS=,
set -- $query
IFS=" "
i=0
while [ $i -lt {count} ]; do
  line=""
  for field in "$@"; do
    case "$field" in
      index) value=$i;;
      name) value={name};;
      memory.total) value={memory};;
      memory.used|utilization.gpu) value=0;;
      power.draw) value=21.5;;
      temperature.gpu) value=31;;
      driver_version) value={driver};;
      *) echo "Field \\"$field\\" is not a valid field to query." >&2; exit 2;;
    esac
    line="${{line:+$line, }}$value"
  done
  echo "$line"
  i=$((i + 1))
done
"""


def install(bin_dir: Path, count: int, name: str, memory_mb: int) -> Path:
    """An `nvidia-smi` in `bin_dir` showing `count` boards `name` of `memory_mb` MB."""
    exe = bin_dir / "nvidia-smi"
    exe.write_text(
        _SCRIPT.format(
            count=int(count), name=shlex.quote(name), memory=int(memory_mb), driver=DRIVER
        )
    )
    exe.chmod(0o755)
    return exe
