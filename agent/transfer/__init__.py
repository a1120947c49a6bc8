"""The transfer service: workspace push and output pull over the `swjob/xfer/5` ALPN.

One codec for both directions (`wire`), shared tree walking (`walk`), path safety
(`safety`), compression that only runs when it pays (`compress`), and the two ends
of a stream (`sender`, `receiver`). `server.serve_transfer` is the node side; the
operator side lives in `engine.run.transfer`.
"""

from __future__ import annotations

from agent.transfer.errors import TransferError, UnsafePath
from agent.transfer.progress import Progress

__all__ = ["Progress", "TransferError", "UnsafePath"]
