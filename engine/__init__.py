"""swjob operator side: job files, pools, the FSM, the orchestrator, providers and the CLI.

Imports `agent` (the shared wire and codec) but never `tui` or `textual`.
"""

from __future__ import annotations
