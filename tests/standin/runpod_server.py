"""A local stand-in of RunPod's GraphQL API, for the real `runpod` SDK (`RUNPOD_API_BASE_URL`).

It answers what swjob's RunPod provider sends, as the SDK (runpod/api/*) and swjob's own
mutations spell it: `gpuTypes` (every type with its secure/community and spot prices,
or one by id), `podFindAndDeployOnDemand`, `podRentInterruptable` (a bid per GPU),
`pod(input: {podId})`, `myself { pods }`, `podTerminate`, `podStop`. Queries are read
with regular expressions (the stand-in needs the fields, not a GraphQL engine). Every
request needs `Authorization: Bearer <key>`: the account's key for all, a pod's own key
(`RUNPOD_API_KEY` in its env) only to look up or terminate that pod; another key answers
401, as RunPod does.

A pod is a local process: its `dockerArgs` run under the Vast stand-in's container init
(container.py) with RunPod's environment — `RUNPOD_POD_ID`, the pod-scoped
`RUNPOD_API_KEY` and the create's `env` — so the real agent boots and joins. Its
`runtime` is null until the container runs (`boot_delay_s`), which the provider reads as
"container running". Faults: `no_capacity` (GPU type ids RunPod has no machine for, or
"*"), `terminate_lag_s` (a terminated pod still listed TERMINATED for a while),
`never_start` (the image never comes up; `lastStatusChange` says why).
"""

from __future__ import annotations

import functools
import json
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.standin import gpus
from tests.standin.cloud import HERE, HOST_ENV, image_bin, stop_process
from tests.standin.quietserver import QuietServer

NO_CAPACITY = (
    "There are no longer any instances available with the requested specifications. "
    "Please refresh and try again."
)
GPU_TYPES = [
    {
        "id": "NVIDIA GeForce RTX 4090",
        "displayName": "RTX 4090",
        "memoryInGb": 24,
        "secureCloud": True,
        "communityCloud": True,
        "securePrice": 0.69,
        "communityPrice": 0.34,
        "secureSpotPrice": 0.35,
        "communitySpotPrice": 0.2,
        "maxGpuCount": 8,
    },
    {
        "id": "NVIDIA RTX A6000",
        "displayName": "RTX A6000",
        "memoryInGb": 48,
        "secureCloud": True,
        "communityCloud": False,
        "securePrice": 0.76,
        "communityPrice": None,
        "secureSpotPrice": 0.4,
        "communitySpotPrice": None,
        "maxGpuCount": 8,
    },
    {
        "id": "NVIDIA GeForce RTX 3090",
        "displayName": "RTX 3090",
        "memoryInGb": 24,
        "secureCloud": False,
        "communityCloud": True,
        "securePrice": None,
        "communityPrice": 0.22,
        "secureSpotPrice": None,
        "communitySpotPrice": 0.11,
        "maxGpuCount": 4,
    },
]
_FIELD = re.compile(r'(\w+):\s*("(?:[^"\\]|\\.)*"|[^,\s{}\[\]]+)')
_ENV = re.compile(r'\{\s*key:\s*"((?:[^"\\]|\\.)*)",\s*value:\s*"((?:[^"\\]|\\.)*)"\s*\}')


@dataclass
class Faults:
    no_capacity: set[str] = field(default_factory=set)  # GPU type ids; "*": every type
    terminate_lag_s: float = 0.0
    never_start: bool = False
    boot_delay_s: float = 0.0


@dataclass
class Pod:
    id: str
    fields: dict[str, Any]
    env: dict[str, str]
    root: Path
    cost: float
    bid: float | None = None
    status: str = "RUNNING"
    runtime: bool = False
    said: str = "Rented by User"
    key: str = field(default_factory=lambda: "rpa_pod_" + secrets.token_hex(16))
    process: subprocess.Popen[bytes] | None = None
    gone_at: float | None = None  # terminated: unlisted from this time (monotonic)

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.fields.get("name"),
            "desiredStatus": self.status,
            "costPerHr": self.cost,
            "imageName": self.fields.get("imageName"),
            "dockerArgs": self.fields.get("dockerArgs"),
            "env": [f"{k}={v}" for k, v in self.env.items()],
            "gpuCount": self.fields.get("gpuCount"),
            "containerDiskInGb": self.fields.get("containerDiskInGb"),
            "volumeInGb": self.fields.get("volumeInGb"),
            "lastStatusChange": self.said,
            "podType": "INTERRUPTABLE" if self.bid is not None else "RESERVED",
            "uptimeSeconds": 0,
            "runtime": {"ports": []} if self.runtime and self.status == "RUNNING" else None,
            "machine": {"gpuDisplayName": self.fields.get("gpuTypeId")},
        }


class RunPodStandIn:
    def __init__(self, root: Path, api_key: str) -> None:
        self.root = root
        self.api_key = api_key
        self.gpu_types = [dict(g) for g in GPU_TYPES]
        self.pods: dict[str, Pod] = {}
        self.terminated: list[str] = []
        self.faults = Faults()
        self.leaked: list[str] = []
        self.lock = threading.RLock()
        self._boots: list[threading.Timer] = []
        self._server = QuietServer(("127.0.0.1", 0), _handler(self))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> RunPodStandIn:
        serve = functools.partial(self._server.serve_forever, poll_interval=0.05)  # quick shutdown
        threading.Thread(target=serve, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        for timer in self._boots:  # no pod boots after the test
            timer.cancel()
            timer.join()
        with self.lock:
            self.leaked = self.live()
            for pod in list(self.pods.values()):
                pod.status = "TERMINATED"
                stop_process(pod.process)
            self.pods.clear()

    def live(self) -> list[str]:
        """Pods not terminated (what bills)."""
        return [p for p, pod in self.pods.items() if pod.status != "TERMINATED"]

    # ---- GraphQL ------------------------------------------------------------------------

    def answer(self, query: str, key: str | None) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self._settle()
            pod_of_key = next((p for p in self.pods.values() if p.key == key), None)
            if key != self.api_key and pod_of_key is None:
                return 401, {"error": "Unauthorized"}
            if pod_of_key is not None and not self._pod_may(pod_of_key, query):
                return 401, {"error": "Unauthorized"}
            try:
                return 200, {"data": self._data(query)}
            except _Refused as refused:
                return 200, {"errors": [{"message": str(refused)}]}
            except _Malformed as malformed:  # a GraphQL server refuses a query it can't parse
                return 400, {"errors": [{"message": f"Syntax Error: {malformed}"}]}

    def _pod_may(self, pod: Pod, query: str) -> bool:
        """A pod's key acts on its own pod only."""
        fields = {k: _value(v) for k, v in _FIELD.findall(query)}
        return ("podTerminate" in query or "pod(" in query) and fields.get("podId") == pod.id

    def _data(self, query: str) -> dict[str, Any]:
        fields = {k: _value(v) for k, v in _FIELD.findall(query.split("env:")[0])}
        if "podFindAndDeployOnDemand" in query or "podRentInterruptable" in query:
            name = next(
                n for n in ("podFindAndDeployOnDemand", "podRentInterruptable") if n in query
            )
            pairs = _ENV.findall(query)
            if query.split("env:", 1)[-1].count("key:") != len(pairs):
                raise _Malformed("an env value ends its string early (an unescaped quote)")
            env = {json.loads(f'"{k}"'): json.loads(f'"{v}"') for k, v in pairs}
            return {name: self._create(fields, env, spot=name == "podRentInterruptable")}
        if "podTerminate" in query:
            self.terminate(str(fields["podId"]))
            return {"podTerminate": None}
        if "podStop" in query:
            self.stop(str(fields["podId"]))
            return {"podStop": {"id": fields["podId"], "desiredStatus": "EXITED"}}
        if "gpuTypes" in query:
            wanted = fields.get("id")
            return {"gpuTypes": [g for g in self.gpu_types if wanted in (None, g["id"])]}
        if "pod(" in query:
            pod = self.pods.get(str(fields["podId"]))
            return {"pod": pod.row() if pod else None}
        if "myself" in query:
            return {"myself": {"pods": [p.row() for p in self.pods.values()]}}
        raise _Refused("unknown query")

    def add_pod(self, name: str, gpu_type_id: str = "NVIDIA GeForce RTX 3090") -> Pod:
        """A pod created as if by the API (a test's own, or another operator's)."""
        with self.lock:
            made = self._create({"name": name, "gpuTypeId": gpu_type_id}, {}, spot=False)
            return self.pods[made["id"]]

    def _create(self, fields: dict[str, Any], env: dict[str, str], spot: bool) -> dict[str, Any]:
        gpu = next((g for g in self.gpu_types if g["id"] == fields.get("gpuTypeId")), None)
        if gpu is None:
            raise _Refused("Invalid GPU type")
        cloud = str(fields.get("cloudType", "ALL")).lower()
        prices = [
            gpu.get(f"{c}{'SpotPrice' if spot else 'Price'}") for c in ("secure", "community")
        ]
        price = prices[0] if cloud == "secure" else prices[1] if cloud == "community" else None
        price = price or min(p for p in prices if p)
        if "*" in self.faults.no_capacity or gpu["id"] in self.faults.no_capacity:
            raise _Refused(NO_CAPACITY)
        count = int(fields.get("gpuCount") or 1)
        bid = fields.get("bidPerGpu") if spot else None
        if spot and (bid is None or float(bid) < price):
            raise _Refused(f"Your bid price ${bid} is below the minimum ${price}")
        pod_id = secrets.token_hex(7)
        pod = Pod(
            pod_id, fields, env, self.root / f"pod-{pod_id}", round((bid or price) * count, 4)
        )
        pod.bid = bid
        self.pods[pod_id] = pod
        if self.faults.never_start:
            pod.said = (
                f"Error response from daemon: pull access denied for {fields.get('imageName')}"
            )
        else:
            timer = threading.Timer(self.faults.boot_delay_s, self._boot, args=(pod,))
            self._boots.append(timer)
            timer.start()
        return {
            "id": pod_id,
            "imageName": fields.get("imageName"),
            "env": pod.row()["env"],
            "machineId": "m1",
            "machine": {"podHostId": f"{pod_id}-64410"},
        }

    def _boot(self, pod: Pod) -> None:
        with self.lock:
            if pod.status != "RUNNING":
                return
            home = pod.root / "root"
            home.mkdir(parents=True)
            (pod.root / "start.sh").write_text(
                str(pod.fields.get("dockerArgs") or "sleep infinity")
            )
            programs = image_bin(pod.root, with_uv=True)
            board = next(g for g in self.gpu_types if g["id"] == pod.fields.get("gpuTypeId"))
            count = int(pod.fields.get("gpuCount") or 1)
            gpus.install(programs, count, board["displayName"], board["memoryInGb"] * 1024)
            env = {
                "PATH": f"{programs}:/usr/local/bin:/usr/bin:/bin",
                "HOME": str(home),
                "LANG": "C.UTF-8",
                **{k: v for k in HOST_ENV if (v := _environ(k))},
                **pod.env,
                "RUNPOD_POD_ID": pod.id,
                "RUNPOD_API_KEY": pod.key,
            }
            with (pod.root / "console.log").open("ab") as console:
                pod.process = subprocess.Popen(
                    [sys.executable, str(HERE / "container.py"), str(pod.root / "start.sh")],
                    cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=console, stderr=console,
                    start_new_session=True,
                )  # fmt: skip
            pod.runtime = True
            pod.said = f"Rented by User: started container {pod.fields.get('imageName')}"

    def terminate(self, pod_id: str) -> None:
        with self.lock:
            pod = self.pods.get(pod_id)
            if pod is None or pod.status == "TERMINATED":
                return
            pod.status = "TERMINATED"
            pod.gone_at = time.monotonic() + self.faults.terminate_lag_s
            self.terminated.append(pod_id)
        stop_process(pod.process)
        shutil.rmtree(pod.root, ignore_errors=True)

    def stop(self, pod_id: str, said: str = "Stopped by User") -> None:
        """RunPod stops the pod (a spot pod outbid: `preempt`): its container ends."""
        with self.lock:
            pod = self.pods[pod_id]
            pod.status, pod.said = "EXITED", said
        stop_process(pod.process)

    def preempt(self, pod_id: str) -> None:
        self.stop(pod_id, "Spot pod interrupted: a higher bid took the machine")

    def _settle(self) -> None:
        now = time.monotonic()
        for pod_id, pod in list(self.pods.items()):
            if pod.gone_at is not None and now >= pod.gone_at:
                self.pods.pop(pod_id)


class _Malformed(Exception):
    """A query no GraphQL parser reads (RunPod answers such a query 400)."""


class _Refused(Exception):
    pass


def _environ(name: str) -> str | None:
    import os

    return os.environ.get(name)


def _value(raw: str) -> Any:
    if raw.startswith('"'):
        return json.loads(raw)
    if raw in ("true", "false"):
        return raw == "true"
    if raw == "null":
        return None
    try:
        return float(raw) if "." in raw else int(raw)
    except ValueError:
        return raw  # an enum: SECURE, COMMUNITY, ALL


def _handler(standin: RunPodStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                query = json.loads(self.rfile.read(length))["query"]
            except (ValueError, KeyError):
                status, body = 400, {"errors": [{"message": "bad request"}]}
            else:
                auth = self.headers.get("Authorization") or ""
                key = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
                status, body = standin.answer(query, key)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
