"""The third-party distributions the agent imports: what a rented node must install.

A node runs only `swjob-agent`, never the console or the Vast SDK, so it installs the
swjob wheel with `--no-deps` plus these distributions, pinned to the versions the
operator runs (engine/providers/agent_source.py pins them). That keeps boot — which
a Vast.ai user pays for on every run — to the agent's own closure instead of the
whole product's (textual, rich, the vastai SDK and their trees).

tests/unit/test_agent_closure.py keeps this list equal to what `agent/` imports and
to what pyproject.toml declares.
"""

from __future__ import annotations

DISTRIBUTIONS = ("iroh", "obstore", "pathspec", "psutil", "pydantic", "zstandard")
"""obstore (agent/sink/): the node puts outputs in the sink itself; one Rust wheel whose
only requirement, typing-extensions, pydantic already brings (docs/sink.md)."""
