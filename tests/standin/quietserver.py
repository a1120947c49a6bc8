"""The stand-ins' HTTP server: threaded, and quiet about a client gone mid-answer.

Such a client is normal here — an instance destroying itself dies during its own DELETE,
a test kills an operator in the middle of a request — and the standard server printed a
traceback for each into the suite's output. Anything else is still reported."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
