"""A local stand-in of the Vast.ai REST API, for the real `vastai` SDK (`server_url`).

It implements the endpoints swjob's provider calls — search offers, create (`PUT
/api/v0/asks/<offer>/`), show one instance, list instances (v1, paged with `next_token`),
label, destroy — and checks them as the real API would: a Bearer key on every request,
request bodies of the right shape. Faults are injected through `StandIn.cloud.faults` (5xx,
429, lost create answers, a 400 with Vast's message, a create refused in a 200 (`success:
false`), one accepted without its `new_contract`, a 404 or an empty list for gone instances,
a live instance answered as gone for a few lookups or listed with a status its container
does not have, a destroy that stays listed for a while, a search answered 200 without
`offers`, `start_date` null until an instance first runs). Interruptible offers: a `bid`
search lists offers with a `min_bid`; a create with a `price` is a bid (under the minimum
the instance is created stopped, and with `refuse_low_bids` the create also answers 400);
`cloud.preempt(id)` stops an instance as an outbid would. A container's scoped key
(`CONTAINER_API_KEY`) is accepted only for its own instance. Use it as a context manager: it
binds a free port on 127.0.0.1, serves from a thread, and on exit destroys every instance
still alive (recording them in `leaked`) so no process outlives a test.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.standin.cloud import Cloud, storage
from tests.standin.quietserver import QuietServer
from tests.standin.search import BadRequest, search

PAGE_CAP = 2  # rows per page of the instance list, small so paging is exercised


class _Reply(Exception):
    def __init__(
        self, status: int, body: dict[str, Any] | str, headers: dict[str, str] | None = None
    ):
        self.status, self.body, self.headers = status, body, headers or {}


def _no_such(what: str) -> _Reply:
    return _Reply(404, {"success": False, "error": "no_such_ask", "msg": what})


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded in StandIn.requests instead

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        standin = self.server.standin
        standin.requests.append((method, self.path, dict(self.headers), raw))
        standin.arrived.append(time.monotonic())
        try:
            body = json.loads(raw) if raw else None
            status, reply = 200, standin.handle(method, url.path, url.query, body, self.headers)
            headers: dict[str, str] = {}
        except _Reply as r:
            status, reply, headers = r.status, r.body, r.headers
        except (ValueError, BadRequest) as exc:
            status, reply, headers = (
                400,
                {"success": False, "error": "invalid_args", "msg": str(exc)},
                {},
            )
        text = isinstance(reply, str)
        data = reply.encode() if text else json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class _Server(QuietServer):
    standin: StandIn


class StandIn:
    def __init__(self, root: Path, api_key: str, offers: list[dict[str, Any]] | None = None):
        self.api_key = api_key
        self.cloud = Cloud(root, offers if offers is not None else Cloud.fixture_offers())
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.arrived: list[float] = []  # time.monotonic() of each of `requests`
        self.leaked: list[int] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.standin = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self.leaked = self.cloud.close()

    # ---- request handling ---------------------------------------------------------------

    def handle(self, method: str, path: str, query: str, body: Any, headers: Any) -> dict[str, Any]:
        self._authorize(method, path, headers.get("Authorization"))
        self.cloud.settle()
        self._inject_faults(path)
        for pattern, verb, action in _ROUTES:
            match = re.fullmatch(pattern, path)
            if match and verb == method:
                return action(self, body, parse_qs(query), *match.groups())
        raise _Reply(404, {"success": False, "error": "not_found", "msg": f"{method} {path}"})

    def _authorize(self, method: str, path: str, auth: str | None) -> None:
        """The account key may do anything; a container's key only its own instance."""
        if auth == f"Bearer {self.api_key}":
            return
        with self.cloud.lock:
            owner = next(
                (i for i in self.cloud.instances.values() if auth == f"Bearer {i.container_key}"),
                None,
            )
        if owner is None:
            raise _Reply(401, {"success": False, "error": "auth_error", "msg": "bad API key"})
        if path != f"/api/v0/instances/{owner.id}/":
            raise _Reply(403, {"success": False, "error": "forbidden", "msg": "not your instance"})
        if method == "DELETE" and self.cloud.faults.container_destroy_refused:
            raise _Reply(403, {"success": False, "error": "forbidden", "msg": "cannot destroy"})

    def _inject_faults(self, path: str) -> None:
        faults = self.cloud.faults
        if faults.fail_paths in path and faults.take("fail_next"):
            raise _Reply(faults.fail_status, {"success": False, "error": "server_error"})
        if faults.take("rate_limit_next"):
            after = faults.retry_after_s
            retry = {"Retry-After": f"{after:g}"} if after is not None else {}
            raise _Reply(429, faults.rate_limit_body, retry)

    def _search(self, body: Any, _q: Any) -> dict[str, Any] | str:
        answer, self.cloud.faults.search_answer = self.cloud.faults.search_answer, None
        if answer is not None:  # a 200 that is not a list of offers
            return answer  # a str goes as text/plain
        offers = self.cloud.rentable()
        if isinstance(body, dict) and body.get("type") == "bid":  # the interruptible market
            offers = [o for o in offers if o.get("min_bid") is not None]
        found = search(offers, body)
        return {"offers": [{**o, "storage_total_cost": storage(o)} for o in found]}

    def _create(self, body: Any, _q: Any, offer_id: str) -> dict[str, Any]:
        _check_create(body)
        refusal, self.cloud.faults.create_refusal = self.cloud.faults.create_refusal, None
        if refusal is not None:
            raise _Reply(400, {"success": False, "error": "invalid_args", "msg": refusal})
        if self.cloud.faults.create_refusal_echo:  # a validation message quoting its input
            self.cloud.faults.create_refusal_echo = False
            said = f"env {json.dumps(body['env'])} is not accepted here"
            raise _Reply(400, {"success": False, "error": "invalid_args", "msg": said})
        soft, self.cloud.faults.create_soft_refusal = self.cloud.faults.create_soft_refusal, None
        if soft is not None:  # a refusal in a 200 (Vast's own async client checks `success`)
            return soft
        time.sleep(self.cloud.faults.create_delay_s)
        with self.cloud.lock:
            gates = self.cloud.faults.create_gates
            gate = gates.pop(0) if gates else None
        if gate is not None:
            gate.wait(60)  # a create in flight for as long as the test needs, under any load
        inst = self.cloud.create(int(offer_id), body)
        if inst is None:
            raise _no_such(f"Instance type by id {offer_id} is not available.")
        if self.cloud.faults.refuse_low_bids and self.cloud.low_bid(inst):
            raise _Reply(400, {"success": False, "error": "invalid_args", "msg": inst.status_msg})
        if self.cloud.faults.take("lose_create_answers"):
            raise _Reply(502, {"success": False, "error": "bad_gateway"})
        if self.cloud.faults.take("contract_missing"):
            return {"success": True}
        return {"success": True, "new_contract": inst.id}

    def _show(self, _b: Any, q: dict[str, list[str]], instance_id: str) -> dict[str, Any]:
        if q.get("owner") != ["me"]:
            raise BadRequest("owner=me is required")
        with self.cloud.lock:
            inst = self.cloud.instances.get(int(instance_id))
            if inst is not None and self.cloud.faults.take("vanish_lookups"):
                inst = None  # an eventually consistent listing, this once
            if inst is not None:
                inst.listed_as = self.cloud.faults.listed_status
            if inst is None and self.cloud.faults.gone_404:
                raise _Reply(404, {"success": False, "error": "no_such_instance", "msg": "gone"})
            if inst is None and self.cloud.faults.gone_empty:
                return {"instances": []}
            if inst is not None and self.cloud.faults.show_as_list:
                return {"instances": [{**inst.row(), "id": str(inst.id)}]}
            return {"instances": inst.row() if inst else None}

    def _list(self, _b: Any, q: dict[str, list[str]]) -> dict[str, Any]:
        params = {k: json.loads(v[0]) for k, v in q.items()}
        if not isinstance(params.get("select_filters"), dict):
            raise BadRequest("select_filters must be an object")
        limit = min(int(params.get("limit", 25)), PAGE_CAP)
        start = int(params.get("after_token") or 0)
        with self.cloud.lock:
            listed_from = time.time() - self.cloud.faults.list_lag_s  # eventual consistency
            rows = [
                i.row()
                for _, i in sorted(self.cloud.instances.items())
                if i.start_date <= listed_from
            ]
        page = rows[start : start + limit]
        more = start + limit < len(rows)
        token = str(start + limit) if more else None
        return {"instances": page, "next_token": token, "total_instances": len(rows)}

    def _change(self, body: Any, _q: Any, instance_id: str) -> dict[str, Any]:
        """Label an instance, or stop it (`{"state": "stopped"}`)."""
        if body == {"state": "stopped"}:
            if int(instance_id) not in self.cloud.instances:
                raise _no_such(f"no instance {instance_id}")
            if self.cloud.faults.take("stop_refusals"):
                return {"success": False, "error": "invalid_request", "msg": "cannot stop"}
            self.cloud.stop(int(instance_id))
            return {"success": True}
        if not isinstance(body, dict) or set(body) != {"label"}:
            raise BadRequest("only {'label': ...} or {'state': 'stopped'} can be changed here")
        with self.cloud.lock:
            inst = self.cloud.instances.get(int(instance_id))
            if inst is None:
                raise _no_such(f"no instance {instance_id}")
            inst.label = str(body["label"])
        return {"success": True}

    def _destroy(self, _b: Any, _q: Any, instance_id: str) -> dict[str, Any]:
        faults = self.cloud.faults
        if faults.destroy_never or faults.take("destroy_failures"):
            raise _Reply(500, {"success": False, "error": "server_error", "msg": "try again"})
        if faults.take("destroy_refusals"):  # as Vast's CLI reads it: no success, its msg
            return {"success": False, "error": "invalid_request", "msg": "instance is locked"}
        if not self.cloud.destroy(int(instance_id)):
            raise _Reply(404, {"success": False, "error": "no_such_instance", "msg": "gone"})
        return {"success": True}


def _check_create(body: Any) -> None:
    """The create body as the API insists on it."""
    if not isinstance(body, dict) or body.get("client_id") != "me":
        raise BadRequest("client_id must be 'me'")
    if not isinstance(body.get("image"), str) or not body["image"]:
        raise BadRequest("image is required")
    if not isinstance(body.get("disk"), int | float) or body["disk"] <= 0:
        raise BadRequest("disk must be a positive number of GB")
    env = body.get("env")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise BadRequest("env must be an object of strings")
    if body.get("onstart") is not None and not isinstance(body["onstart"], str):
        raise BadRequest("onstart must be a string")
    price = body.get("price")
    if price is not None and (not isinstance(price, int | float) or price <= 0):
        raise BadRequest("price (the bid) must be a positive number of $/h")


_ROUTES = [
    (r"/api/v0/bundles/", "POST", StandIn._search),
    (r"/api/v0/asks/(\d+)/", "PUT", StandIn._create),
    (r"/api/v0/instances/(\d+)/", "GET", StandIn._show),
    (r"/api/v1/instances/", "GET", StandIn._list),
    (r"/api/v0/instances/(\d+)/", "PUT", StandIn._change),
    (r"/api/v0/instances/(\d+)/", "DELETE", StandIn._destroy),
]
