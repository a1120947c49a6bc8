"""The Engine's collaborators, one job each, so a reader holds one in mind at a time.

- `config.py`    the engine's settings and its one-line submit error.
- `providers.py` one provider per pool, a rented pool's SDK loaded before its first use.
- `fallover.py`  which of a pool and its `fallback` pools has an offer.
- `runs.py`      the runs this engine drives: submit, start an attempt, drive it to its
                 end, chain the next attempt, index each change, stop.
- `adoption.py`  carrying on runs whose owner is gone (and recorded next attempts).
- `orphans.py`   nodes billing without a live run: found, warned of, collected.
- `nodes.py`     the pools as the board shows them, and the nodes kept warm.

`engine/engine.py` wires them into the Engine, the one object a program drives.
"""

from __future__ import annotations
