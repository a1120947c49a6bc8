"""`python -m agent` runs the node agent, like the `swjob-agent` console script."""

from __future__ import annotations

import sys

from agent.main import main

sys.exit(main())
