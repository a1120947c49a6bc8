"""Hostile local users against the engine's access point and `swjob forward`: a flood
of idle connections (with the common `ulimit -n 1024`) while a run collects, a squatter
on the address a killed engine left behind, and a second local user (uid 65534, by
setpriv, where the tests run as root) against a forwarded port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.state.paths import state_dir
from tests.support.cli import SWJOB, Cli
from tests.support.http import served
from tests.support.processes import kill_quietly, pid_alive
from tests.support.runs import agent_pid, only_run_dir, run_json, waiting_job
from tests.support.waiting import eventually, eventually_async

FLOOD = 1500
FD_LIMIT = 1024
STRANGER = 65534  # nobody


def access(run_id: str) -> dict[str, object]:
    path = state_dir() / "live" / f"{run_id}.json"
    eventually(path.exists, 30, "the run's access file")
    return json.loads(path.read_text())


def dial(where: dict[str, object]) -> socket.socket | None:
    """One connection to an access point as its file names it (a Unix socket, or a TCP
    port as older engines wrote); None when it is refused or not taken within a second."""
    if "socket" in where:
        sock = socket.socket(socket.AF_UNIX)
        address: object = str(where["socket"])
    else:
        sock = socket.socket()
        address = ("127.0.0.1", int(str(where["port"])))
    sock.settimeout(1)
    try:
        sock.connect(address)
    except OSError:
        sock.close()
        return None
    return sock


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.contextmanager
def more_fds(count: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count)), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def limited_swjob(tmp_path: Path, job: Path) -> subprocess.Popen[bytes]:
    """`swjob run job` with `ulimit -n 1024`, its output in a file."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))

    out = (tmp_path / "swjob.out").open("wb")
    runs = str(tmp_path / "runs")
    return subprocess.Popen(
        [*SWJOB, "run", str(job), "--runs-dir", runs], cwd=tmp_path, stdin=subprocess.DEVNULL,
        stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit,
    )  # fmt: skip


class Flood:
    """Another local process opening connection after connection to an access point and
    holding each, as long as the test lasts."""

    def __init__(self, where: dict[str, object]) -> None:
        self.where = where
        self.made = 0
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flood, daemon=True)
        self._thread.start()

    def _flood(self) -> None:
        while not self._stop.is_set() and len(self.held) < 2 * FLOOD:
            if (sock := dial(self.where)) is not None:
                self.held.append(sock)
                self.made += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self.held:
            sock.close()


def test_a_connection_flood_while_a_run_collects_loses_nothing(tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "proj", "flooded", release)
    outputs = "; ".join(f"echo {i} > f{i}.txt" for i in range(40))
    job.write_text(job.read_text().replace('echo done > out.txt"', f'{outputs}"'))
    job.write_text(job.read_text().replace('"out.txt"', '"f*.txt"'))
    cli = limited_swjob(tmp_path, job)
    flood = None
    try:
        run_dir = only_run_dir(tmp_path / "runs", "flooded")
        with more_fds(4 * FLOOD):
            flood = Flood(access(run_dir.name))
            eventually(
                lambda: open_fds(cli.pid) >= FD_LIMIT - 50 or flood.made >= FLOOD,
                60,
                "the flood taken in or turned away",
            )
            release.touch()  # the job ends and its outputs are collected under the flood
            assert cli.wait(90) == 0, (tmp_path / "swjob.out").read_text()
            flood.stop()
    finally:
        if flood is not None:
            flood.stop()
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    summary = run_json(run_dir)
    assert summary["state"] == "COMPLETED", summary
    landed = sorted(p.name for p in (run_dir / "outputs").iterdir())
    assert landed == sorted(f"f{i}.txt" for i in range(40))


class Squatter:
    """Listens where a killed engine listened and keeps every byte it is sent."""

    def __init__(self, where: dict[str, object]) -> None:
        if "socket" in where:
            path = Path(str(where["socket"]))
            path.unlink(missing_ok=True)
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.bind(str(path))
        else:
            self.sock = socket.socket()
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("127.0.0.1", int(str(where["port"]))))
        self.sock.listen(8)
        self.sock.settimeout(0.5)
        self.heard = b""

    def listen_once(self) -> None:
        """Take what a connection sends within a few seconds, answering like a shell. A
        client that found us out closes at once: our answer then meets a closed pipe."""
        with contextlib.suppress(TimeoutError, BrokenPipeError, ConnectionResetError):
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(3)
                conn.sendall(b'{"ok": true}\n\x00\x00\x00\x06\x01fake$')
                with contextlib.suppress(OSError):
                    while chunk := conn.recv(4096):
                        self.heard += chunk


def test_a_squatter_on_the_stale_access_address_gets_nothing(tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "proj", "squatted", release)
    owner = Cli("run", str(job), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    node = None
    try:
        run_dir = only_run_dir(tmp_path / "runs", "squatted")
        node = agent_pid(run_dir)
        where = access(run_dir.name)
        owner.kill9()  # its access file stays behind
        squatter = Squatter(where)
        shell = subprocess.Popen(
            [*SWJOB, "shell", run_dir.name], cwd=tmp_path, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        shell.stdin.write(b"typed secret\n")
        shell.stdin.flush()
        squatter.listen_once()
        out, err = shell.communicate(timeout=30)
        squatter.sock.close()
    finally:
        owner.close()
        release.touch()
        if node is not None:
            kill_quietly(node, signal.SIGTERM)  # the orphan stops its job and exits
    assert squatter.heard == b"", "the squatter was sent the token or keys"
    assert shell.returncode == 1, (out, err)
    assert f"no swjob process drives run {run_dir.name}" in err.decode()
    assert b"fake" not in out
    if node is not None:
        eventually(lambda: not pid_alive(node), 30, "the orphaned agent gone")


def can_switch_user() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def as_stranger(code: str) -> subprocess.CompletedProcess[str]:
    """Python `code` run by another local user (uid 65534)."""
    ids = [f"--reuid={STRANGER}", f"--regid={STRANGER}", "--clear-groups"]
    return subprocess.run(
        ["setpriv", *ids, sys.executable, "-I", "-c", code],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip


FETCH = """
import socket, sys
s = socket.create_connection(("127.0.0.1", {port}), timeout=10)
s.sendall(b"GET /{name} HTTP/1.0\\r\\n\\r\\n")
got = b""
try:
    while chunk := s.recv(4096):
        got += chunk
except OSError:
    pass
print(repr(got))
"""


DIAL = """
import json, socket
where = json.loads({where!r})
try:
    if "socket" in where:
        s = socket.socket(socket.AF_UNIX)
        s.connect(where["socket"])
    else:
        s = socket.create_connection(("127.0.0.1", where["port"]), timeout=10)
    s.sendall(b'{{"token": "guess", "run_id": "x", "request": {{}}}}\\n')
    s.settimeout(10)
    got = s.recv(4096)
    print(repr(got) if got else "refused")
except OSError:
    print("refused")
"""


@pytest.mark.skipif(not can_switch_user(), reason="needs root and setpriv for a second user")
async def test_another_local_user_cannot_use_a_forwarded_port(engine, make_job, tmp_path) -> None:
    port = _free_port()
    local = _free_port()
    run = f"echo private > p.txt; exec python3 -m http.server {port} --bind 127.0.0.1"
    run_id = await engine.submit(make_job(run=run), "local")
    await eventually_async(lambda: (v := engine.run(run_id)) is not None and v.phase == "run")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "engine.cli", "forward", run_id, str(port), "--local", str(local),
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await asyncio.wait_for(proc.stdout.readline(), 20)
        assert await served(local, "p.txt") == "private\n"  # the operator's own fetch works
        stranger = await asyncio.to_thread(as_stranger, FETCH.format(port=local, name="p.txt"))
        assert stranger.returncode == 0, stranger.stderr
        assert "private" not in stranger.stdout
        assert stranger.stdout.strip() == "b''"  # closed before a byte was relayed
        where = access(run_id)  # the engine's access point, which `swjob shell` uses
        shell = await asyncio.to_thread(as_stranger, DIAL.format(where=json.dumps(where)))
        assert shell.stdout.strip() == "refused", shell.stdout + shell.stderr
    finally:
        proc.kill()
        await proc.wait()
        await engine.stop(run_id)
        await asyncio.wait_for(engine.wait(run_id), 30)


async def test_forward_listens_on_a_private_unix_socket_by_default(engine, make_job) -> None:
    port = _free_port()
    run = f"echo unix > u.txt; exec python3 -m http.server {port} --bind 127.0.0.1"
    run_id = await engine.submit(make_job(run=run), "local")
    await eventually_async(lambda: (v := engine.run(run_id)) is not None and v.phase == "run")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "engine.cli", "forward", run_id, str(port),
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        path = Path(line.split("forwarding ", 1)[1].split(" → ", 1)[0])
        assert path.is_socket() and (path.stat().st_mode & 0o777) == 0o600
        assert (path.parent.stat().st_mode & 0o777) == 0o700
        body = await asyncio.to_thread(_fetch_unix, path, "u.txt")
        assert body.endswith(b"unix\n")
    finally:
        proc.kill()
        await proc.wait()
        await engine.stop(run_id)
        await asyncio.wait_for(engine.wait(run_id), 30)


def _fetch_unix(path: Path, name: str) -> bytes:
    deadline = 20
    for _ in range(deadline * 10):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(path))
            sock.sendall(f"GET /{name} HTTP/1.0\r\n\r\n".encode())
            got = b""
            with contextlib.suppress(OSError):
                while chunk := sock.recv(4096):
                    got += chunk
        if got:
            return got
        import time

        time.sleep(0.1)  # the node's server not up yet: the node closed that connection
    raise AssertionError(f"nothing served through {path}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
