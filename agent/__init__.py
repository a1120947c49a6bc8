"""swjob node side: the `swjob-agent` process that runs a job's commands on a node.

This package imports nothing from `engine` or `tui`; the engine imports from it
(protocol, transfer codec, redaction) so both ends share one definition of the wire.
"""

from __future__ import annotations

__version__ = "0.1.0"
