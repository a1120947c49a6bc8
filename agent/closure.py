"""The third-party distributions the agent imports: what a rented node must install.

A node runs only `swjob-agent`, never the console or the Vast SDK, so it installs the
swjob wheel with `--no-deps` plus these distributions, pinned to the versions the
operator runs (engine/providers/agent_source.py pins them). That keeps boot — which
a Vast.ai user pays for on every run — to the agent's own closure instead of the
whole product's (textual, rich, the vastai SDK and their trees).

tests/unit/test_agent_closure.py keeps these lists equal to what `agent/` imports and
to what pyproject.toml declares.
"""

from __future__ import annotations

DISTRIBUTIONS = ("iroh", "pathspec", "psutil", "pydantic", "zstandard")
"""What every node installs: 10 packages with what they require."""
SINK_DISTRIBUTIONS = ("obstore",)
"""What a node whose run's pool has a `sink` installs as well (11 packages then): the
store client the node puts outputs in the sink with (agent/sink/), one Rust wheel whose
only requirement, typing-extensions, pydantic already brings (docs/sink.md). The agent
imports it only when it is given a sink (agent/sinkhand.py)."""
