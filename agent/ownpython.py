"""A command line that runs Python code of this very agent package in a new interpreter.

Used where the agent starts itself anew (its re-exec without secrets, agent/credentials.py)
or a helper of its own (the landers, agent/transfer/landproc.py). Not `-m agent`: an agent
the node fetched from its operator (agent/codefetch.py) lives in a directory that is on no
sys.path but the one codefetch made, so `-m` would find none (or another swjob installed
there). Its directory goes first only when not already on the path: an installed agent's
site-packages must not shadow the standard library. `-P`: no working directory on the
path either, where a job (the agent's user) could leave a module of its own.
"""

from __future__ import annotations

import os
import sys


def own_python(then: str) -> list[str]:
    """`python -P -c` running `then` (Python source) with this agent package importable."""
    home = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    program = f"import sys;h={home!r};h in sys.path or sys.path.insert(0,h);{then}"
    return [sys.executable, "-P", "-c", program]
