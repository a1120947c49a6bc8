"""swjob's operator side, in rooms that say what lives there.

- `jobs/`      what the user hands in: job files (spec §4), pool designations, the push plan.
- `report/`    what a run tells the world: typed events, the datastream, run views folded
               from events, and how money and job text are shown.
- `state/`     what outlives the process: the run index, the instance ledger, the
               operator's identity, state paths.
- `providers/` where nodes come from: the local pool, Vast.ai, and orphan collection.
- `run/`       the machinery of one run: the pure FSM, the driver that carries out its
               commands, node control, transfers, crash recovery.
- `ops/`       what a client asks of runs and pools by name — stop a run from any
               terminal, follow its log, list offers, check pools — shared by the CLI's
               verbs and `api.py`.
- `watch/`     subscribers acting on what runs tell: notifications (Apprise), the bad-host
               memory; started by the Engine, never driving a run.
- `sweep/`     many runs of one job: grid variants, a concurrency bound, one dollar cap,
               the sweep's record for other processes (on top of the Engine).
- `core/`      the Engine's collaborators: a provider per pool, the runs it drives
               (submit, chain, stop), adoption, orphans, pools and warm nodes.
- `cli/`       the headless `swjob` program.
- `logsetup.py` where the engine's warnings go: stderr for `swjob`, a private file for the
               console (re-exported by `api.py`).
- `engine.py`  the Engine: the one object a program drives, wiring `core/`; `api.py` is
               the surface a console may use (the TUI and the `swjob` Python package import
               nothing else of the engine).

Imports `agent` (the shared wire and codec) but never `tui` or `textual`; no package
imports `cli`, and the lower rooms (jobs, report, state) never import run or providers.
"""

from __future__ import annotations
