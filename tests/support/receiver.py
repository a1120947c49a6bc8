"""A notification service standing in for ntfy/webhook targets: a real HTTP server on
loopback that keeps every JSON message posted to it (Apprise's `json://` target), and
refuses the first `refuse` of them with a 500 (a service having a bad moment)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

__all__ = ["Receiver", "receiver"]


class Receiver:
    def __init__(self, refuse: int = 0) -> None:
        self.messages: list[dict[str, str]] = []  # the ones taken, in arrival order
        self.refused = 0
        self._refuse = refuse
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with owner._lock:
                    refuse = owner.refused < owner._refuse
                    if refuse:
                        owner.refused += 1
                    else:
                        owner.messages.append(json.loads(body))
                self.send_response(500 if refuse else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:  # quiet: pytest shows stderr
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"json://127.0.0.1:{self._server.server_port}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def titles(self) -> list[str]:
        with self._lock:
            return [m["title"] for m in self.messages]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver that refuses its first message (so every test also sees a retry)."""
    served = Receiver(refuse=1)
    try:
        yield served
    finally:
        served.close()
