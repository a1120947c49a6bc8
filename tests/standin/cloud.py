"""The stand-in's fake Vast.ai cloud: offers, instances (booted as local processes), faults.

HTTP lives in server.py; this module is the state behind it, guarded by one lock
because the HTTP server is threaded. An instance goes through the states Vast documents
for `actual_status`: null while the host schedules it (`schedule_s`), `loading` while
the image is pulled (`boot_delay_s`), then `running` once the container runs its
on-start command — `intended_status`, `cur_state` and `next_state` read `running`
throughout, and `status_msg` says what is going on. An instance boots by writing its on-start
command to a script in its own directory and running it under container.py (a tiny
init) with the instance's env, `HOME` pointing into that directory and the host's
iroh settings (loopback only in tests), so the real `swjob-agent` joins for real.
Like on Vast, each container gets `CONTAINER_ID` and a `CONTAINER_API_KEY` scoped to
its own instance (server.py refuses it for anything else), and sees the host's GPUs
through the `nvidia-smi` the NVIDIA runtime would give it (gpus.py).

The image's programs are the host venv's `python3`, and `uv` when the image ships it
(`Cloud.image_has_uv`, as many ML images do, if uv is installed next to this
interpreter): the on-start install then checks the already-installed agent in
~20 ms instead of pip's ~0.8 s of CPU, once per instance the suite boots. A test that
times or needs pip's branch turns it off. A bare image (`Cloud.image_has_python` off, as
CUDA base images are) has neither: only a shell and the few tools its PATH lists, none of
the host's.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.standin import gpus

HERE = Path(__file__).parent
HOST_ENV = ("SWJOB_IROH_RELAY", "SWJOB_IROH_BIND")  # the "host network" of the stand-in
# Not `swjob-agent`: an image has none. The install puts it in that python's own scripts
# directory (here the host venv's bin), which need not be on the container's PATH (a
# `pip --user` install, a python3 whose scripts dir the image's PATH leaves out).
IMAGE_PROGRAMS = ("python3", "python")
NULLABLE = (  # fields Vast may list as null on an instance (other tools guard them)
    "dph_total", "gpu_name", "geolocation", "status_msg",
    "ssh_host", "ssh_port", "public_ipaddr", "ports",
)  # fmt: skip
BARE_TOOLS = ("bash", "sh", "mkdir", "date", "cat", "sleep")  # a bare image's own


def storage(offer: dict[str, Any]) -> float:
    """$/h of an offer's disk: what its total adds to its base price (Vast's
    `storage_total_cost`, listed with each offer a search returns)."""
    total, base = offer.get("dph_total"), offer.get("dph_base")
    return round(total - base, 6) if total is not None and base is not None else 0.0


def image_bin(
    root: Path, with_uv: bool, with_python: bool = True, python: Path | None = None
) -> Path:
    """A directory of the image's programs: each runs the host venv's own (a wrapper, not a
    link: a venv's python finds its packages only when started by its own path), or
    `python`'s for the image's python. A bare image's holds only links to a shell and a few
    tools."""
    venv_bin = Path(sys.executable).parent
    programs = [*(IMAGE_PROGRAMS if with_python else ()), *(["uv"] if with_uv else [])]
    bin_dir = root / "image-bin"
    bin_dir.mkdir()
    for tool in () if with_python else BARE_TOOLS:
        found = shutil.which(tool)
        assert found, f"the stand-in's bare image needs {tool} on this machine"
        (bin_dir / tool).symlink_to(found)
    for name in programs:
        program = python if python is not None and name in IMAGE_PROGRAMS else venv_bin / name
        if program.exists():
            wrapper = bin_dir / name
            wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(str(program))} "$@"\n')
            wrapper.chmod(0o755)
    return bin_dir


@dataclass
class Faults:
    """Knobs a test turns. Counters count down as they fire."""

    fail_next: int = 0  # the next N requests answer `fail_status`
    fail_status: int = 500
    fail_paths: str = ""  # only requests whose path contains this (empty: all)
    rate_limit_next: int = 0  # the next N requests answer 429
    retry_after_s: float | None = 0.05  # its Retry-After (None: none, as Vast sends today)
    rate_limit_body: str | dict[str, Any] = field(  # a str goes as text/plain, as Vast's does
        default_factory=lambda: {"success": False, "error": "rate_limited"}
    )
    schedule_s: float = 0.0  # actual_status null: the host has not begun to load the image
    boot_delay_s: float = 0.0  # then "loading" (the image pull) this long, then "running"
    never_start: bool = False  # instances stay "loading" and never run their command
    pull_error: str | None = None  # the image pull fails: "loading" for ever, this status_msg
    vanish_at_create: set[int] = field(default_factory=set)  # offer ids rented away
    create_delay_s: float = 0.0  # a slow create call
    create_gates: list[threading.Event] = field(default_factory=list)  # the next creates,
    # in order, each answered only once the test sets its gate (in flight for as long)
    lose_create_answers: int = 0  # the next N creates succeed but answer 502
    contract_missing: int = 0  # the next N creates succeed but answer 200 without new_contract
    destroy_failures: int = 0  # the next N destroys answer 500
    destroy_never: bool = False  # every destroy answers 500
    destroy_refusals: int = 0  # the next N destroys answer 200 `success: false`, undone
    stop_refusals: int = 0  # the next N stops answer 200 `success: false`, undone
    gone_404: bool = False  # looking up a gone instance answers 404 (not {"instances": null})
    gone_empty: bool = False  # ... answers 200 {"instances": []}
    show_as_list: bool = False  # looking one up answers a list of its row, the id as text
    vanish_lookups: int = 0  # the next N lookups of a live instance answer as for a gone one
    # (null, or 404/[] with gone_404/gone_empty): Vast's listings are eventually consistent
    listed_status: str | None = None  # instances are listed with this actual_status (e.g.
    # "exited") whatever their container does: Vast's view of a host it lost touch with
    destroy_lag_s: float = 0.0  # an accepted destroy stays listed this long (eventual)
    list_lag_s: float = 0.0  # a created instance shows in the list only this long after
    create_refusal: str | None = None  # the next create answers 400 invalid_args with this msg
    create_refusal_echo: bool = False  # the next create answers 400 quoting the env it was sent
    create_soft_refusal: dict[str, Any] | None = None  # the next create answers 200 with this
    container_destroy_refused: bool = False  # a container key may stop, not destroy
    refuse_low_bids: bool = False  # a bid under the minimum answers 400, instance left stopped
    bid_war: float = 0.0  # minimum bids rise by this at create (outbid since the search)
    unstarted_null_start: bool = False  # start_date is null until the instance first runs
    null_listing: bool = False  # instance rows list price, GPU, place and ssh as null
    search_answer: dict[str, Any] | str | None = None  # the next search answers 200 with this
    gpus_shown: dict[int, int] = field(default_factory=dict)  # machine id → the GPUs its
    # containers see (default: the offer's num_gpus): a host whose GPUs went missing

    def take(self, name: str) -> bool:
        left = getattr(self, name)
        if left > 0:
            setattr(self, name, left - 1)
            return True
        return False


@dataclass
class Instance:
    id: int
    offer: dict[str, Any]
    request: dict[str, Any]
    root: Path
    start_date: float = field(default_factory=time.time)
    status: str | None = None  # Vast's actual_status: null until the host starts loading
    loading_at: float = 0.0  # when (time.time()) the image pull begins
    label: str | None = None
    process: subprocess.Popen[bytes] | None = None
    status_msg: str = ""
    intended: str = "running"
    container_key: str = field(default_factory=lambda: "ck-" + secrets.token_hex(16))
    bid: float | None = None  # $/h bid of an interruptible instance (create's `price`)
    null_until_run: bool = False  # Vast lists a created/loading instance with start_date null
    ran: bool = False
    offline: bool = False  # the host lost touch with Vast: listed "offline", container runs on
    nulls: bool = False  # listed with NULLABLE as null (`Faults.null_listing`)
    listed_as: str | None = None  # `Faults.listed_status`, set on every lookup

    def row(self) -> dict[str, Any]:
        """The instance as the API lists it (the SDK's own show_instance(s) compute with
        start_date and extra_env; Vast sends start_date null before the instance starts)."""
        if self.status is None and time.time() >= self.loading_at:
            self.loading()
        if self.status == "running" and self.process and self.process.poll() is not None:
            self.status = "exited"
        o = self.offer
        row = {
            "id": self.id,
            "machine_id": o["machine_id"],
            "host_id": o["host_id"],
            "actual_status": "offline" if self.offline else self.status,
            **({"actual_status": self.listed_as} if self.listed_as else {}),
            "intended_status": self.intended,
            "cur_state": self.intended,
            "next_state": self.intended,
            "is_bid": self.bid is not None,
            "min_bid": o.get("min_bid"),
            "status_msg": self.status_msg,
            "label": self.label,
            "image_uuid": self.request["image"],
            "image_runtype": self.request.get("runtype"),
            "num_gpus": o["num_gpus"],
            "gpu_name": o["gpu_name"],
            "gpu_ram": o["gpu_ram"],
            # a bid instance bills its bid plus its disk's storage, like an on-demand one
            "dph_total": o["dph_total"] if self.bid is None else self.bid + storage(o),
            "geolocation": o["geolocation"],
            "disk_space": self.request["disk"],
            "onstart": self.request["onstart"],
            "extra_env": [[k, v] for k, v in self.request["env"].items()],
            "start_date": None if self.null_until_run and not self.ran else self.start_date,
            "ssh_host": "ssh1.example.invalid",
            "ssh_port": 20000 + self.id % 1000,
            "public_ipaddr": "198.51.100.7",
            "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41022"}]},
        }
        return row | dict.fromkeys(NULLABLE) if self.nulls else row

    def loading(self) -> None:
        """The host pulls the image (status texts here are illustrative, not Vast's own)."""
        self.status = "loading"
        self.status_msg = f"pulling {self.request['image']}"

    def running(self) -> None:
        self.status = "running"
        self.ran = True
        self.status_msg = f"success, running {self.request['image']}"


class Cloud:
    def __init__(self, root: Path, offers: list[dict[str, Any]]) -> None:
        self.root = root
        self.offers = {o["id"]: dict(o) for o in offers}
        self.instances: dict[int, Instance] = {}
        self.destroyed: list[int] = []
        self.destroyed_at: dict[int, float] = {}  # when (time.time()) each destroy came in
        self.faults = Faults()
        self.image_has_uv = True  # see the module's docstring
        self.image_has_python = True
        self.image_python: Path | None = None  # the image's python3, if not the host venv's
        self.lock = threading.RLock()
        self._next_id = 7000
        self._boots: list[threading.Timer] = []
        self.vanishing: dict[int, float] = {}  # destroyed, still listed until this time

    @staticmethod
    def fixture_offers() -> list[dict[str, Any]]:
        return json.loads((HERE / "offers.json").read_text())

    def rentable(self) -> list[dict[str, Any]]:
        rented = {i.offer["id"] for i in self.instances.values()}
        return [o for o in self.offers.values() if o["id"] not in rented]

    def create(self, offer_id: int, request: dict[str, Any]) -> Instance | None:
        """None when the offer does not exist or is rented (the API answers no_such_ask)."""
        with self.lock:
            if offer_id in self.faults.vanish_at_create:
                self.offers.pop(offer_id, None)
            offer = next((o for o in self.rentable() if o["id"] == offer_id), None)
            if offer is None:
                return None
            self._next_id += 1
            root = self.root / f"instance-{self._next_id}"
            inst = Instance(self._next_id, offer, request, root, label=request.get("label"))
            inst.bid = request.get("price")
            inst.null_until_run = self.faults.unstarted_null_start
            inst.nulls = self.faults.null_listing
            if self.faults.bid_war:
                offer["min_bid"] += self.faults.bid_war
            self.instances[inst.id] = inst
            if inst.bid is not None and inst.bid < offer["min_bid"]:
                inst.intended = inst.status = "stopped"  # Vast creates it, and never starts it
                inst.status_msg = f"bid {inst.bid:g} is below the minimum bid {offer['min_bid']:g}"
                return inst
        inst.loading_at = inst.start_date + self.faults.schedule_s
        if self.faults.never_start or self.faults.pull_error:
            inst.loading()  # a pull that never ends, or fails
            inst.status_msg = self.faults.pull_error or inst.status_msg
        else:
            boot_s = self.faults.schedule_s + self.faults.boot_delay_s
            timer = threading.Timer(boot_s, self._boot, args=(inst,))
            self._boots.append(timer)
            timer.start()
        return inst

    def boot(self, instance_id: int) -> None:
        """End the image pull of an instance held by `never_start` now: its command runs."""
        self._boot(self.instances[instance_id])

    def _boot(self, inst: Instance) -> None:
        with self.lock:
            if inst.id not in self.instances:
                return  # destroyed while "loading"
            (inst.root / "root").mkdir(parents=True)
            (inst.root / "onstart.sh").write_text(inst.request["onstart"] or "true")
            programs = image_bin(
                inst.root, self.image_has_uv, self.image_has_python, self.image_python
            )
            o = inst.offer
            shown = self.faults.gpus_shown.get(o["machine_id"], o["num_gpus"])
            gpus.install(programs, shown, o["gpu_name"], o["gpu_ram"])
            self._start_container(inst)
            inst.running()

    def restart(self, instance_id: int) -> None:
        """Vast restarts the container (a host reboot, PID 1 killed for memory): every
        process in it dies, its disk stays, and its on-start command runs again."""
        with self.lock:
            inst = self.instances[instance_id]
        stop_process(inst.process)
        with self.lock:
            self._start_container(inst)

    def _start_container(self, inst: Instance) -> None:
        """Run the instance's on-start under its init, with the instance's environment."""
        home, programs = inst.root / "root", inst.root / "image-bin"
        system = ":/usr/local/bin:/usr/bin:/bin" if self.image_has_python else ""
        env = {
            "PATH": f"{programs}{system}",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            **{k: os.environ[k] for k in HOST_ENV if k in os.environ},
            **inst.request["env"],
            "CONTAINER_ID": str(inst.id),
            "CONTAINER_API_KEY": inst.container_key,
        }
        with (inst.root / "console.log").open("ab") as console:
            inst.process = subprocess.Popen(
                [sys.executable, str(HERE / "container.py"), str(inst.root / "onstart.sh")],
                cwd=home,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=console,
                start_new_session=True,
            )

    def destroy(self, instance_id: int) -> bool:
        """Accept a destroy; with `destroy_lag_s` the instance stays listed for a while."""
        with self.lock:
            inst = self.instances.get(instance_id)
            if inst is None:
                return False
            if self.faults.destroy_lag_s > 0 and instance_id not in self.vanishing:
                self.vanishing[instance_id] = time.monotonic() + self.faults.destroy_lag_s
            elif instance_id not in self.vanishing:
                self.instances.pop(instance_id)
            if instance_id not in self.destroyed:
                self.destroyed.append(instance_id)
                self.destroyed_at[instance_id] = time.time()
        stop_process(inst.process)
        shutil.rmtree(inst.root, ignore_errors=True)
        return True

    def settle(self) -> None:
        """Drop destroyed instances whose listing lag is over (called on every request)."""
        with self.lock:
            now = time.monotonic()
            for instance_id, until in list(self.vanishing.items()):
                if now >= until:
                    self.vanishing.pop(instance_id)
                    self.instances.pop(instance_id, None)

    def stop(self, instance_id: int, status_msg: str = "") -> None:
        """Vast's stop: the container ends, the instance stays (billing its storage)."""
        with self.lock:
            inst = self.instances[instance_id]
            inst.intended = "stopped"
            inst.status_msg = status_msg
        stop_process(inst.process)
        inst.status = "stopped"

    def preempt(self, instance_id: int) -> None:
        """A higher bid takes the machine: Vast stops the interruptible instance on its own."""
        self.stop(instance_id, status_msg="outbid: a higher bid took the machine")

    def go_offline(self, instance_id: int, offline: bool = True) -> None:
        """The host loses (or regains) its connection to Vast: Vast computes "offline" from
        its missing heartbeats, while the container itself may well run on."""
        with self.lock:
            self.instances[instance_id].offline = offline

    def low_bid(self, instance: Instance) -> bool:
        """The create bid under the offer's minimum (the instance was left stopped)."""
        return instance.bid is not None and instance.bid < instance.offer["min_bid"]

    def crash(self, instance_id: int, status_msg: str = "") -> None:
        """The container dies underneath us (host trouble): it shows as exited."""
        with self.lock:
            inst = self.instances[instance_id]
            inst.status_msg = status_msg
        stop_process(inst.process)
        inst.status = "exited"

    def close(self) -> list[int]:
        """Destroy whatever is left; returns the ids that were still alive (leaks)."""
        for timer in self._boots:
            timer.cancel()
            timer.join()
        with self.lock:
            left = [i for i in self.instances if i not in self.vanishing]
            self.vanishing.clear()
            self.faults.destroy_lag_s = 0
        for instance_id in left:
            self.destroy(instance_id)
        with self.lock:
            self.instances.clear()
        return left


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """TERM the container's init (it kills its descendants), KILL its group if it lingers."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
