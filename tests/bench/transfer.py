"""Transfer benchmark (not part of CI): swjob push/pull vs rsync over ssh and tar|ssh|tar.

Trees: (a) 4 × 256 MiB random, (b) 20,000 × 4 KiB in 200 dirs, (c) a copy of this
venv's site-packages, (d) 100,000 × 1 KiB in 1,000 dirs. `--directions push,pull` moves
each tree from operator to node (a workspace push), node to operator (the tree as a
run's outputs, pulled with its manifest), or both; the references go the same way.
Each tool runs `--reps` times (medians reported) on loopback, and tree (c) again over
a 100 Mbit veth between two network namespaces (tbf-shaped) against `rsync -az`.
swjob's operator and agent run as separate processes and report their peak RSS.
Tree (a) also gets an "iroh floor" row: the same bytes over bare iroh streams
(tests/bench/iroh_floor.py), the ceiling the binding allows, and a "floor+land" row:
the same, the receiver writing the bytes into files on the node disk, the ceiling of
any push that lands them. The "× ref" column holds each loopback row
against the bare floor and each shaped-link row against rsync -az, both measured in the
same run; a line under the table holds swjob against the landing floor. Needs root
(netns, apt-get, a throwaway sshd, a loop mount).

Every tool lands on a "node disk": a fresh journaled ext4 in a sparse file, loop-mounted
under the work dir. The dev machine's own ext4 runs without a journal, and there the
kernel checks every inode freed in the last 30 s before it hands one out again
(`recently_deleted`): after the previous turn's `rm -rf`, creating tree c's 9.9k files
cost 4-8 s of kernel CPU (0.2-0.9 ms a file, against 12 µs on a journaled ext4). That
charged each tool's receiver for a quirk no rented node's disk has, and made the
receiver look CPU-bound; `--land work` lands in the work dir as before, to see it.

`--before DIR` (another swjob checkout) adds a "swjob before" row: that tree's own operator
and agent, taking turns with this one's, for a before → after from one run.

    python tests/bench/transfer.py [--trees a,b,c,d] [--links loopback,shaped] [--reps 3]
        [--directions push,pull] [--shaped-trees c,d]

`--shaped-trees` names the trees that also go over the shaped link (tree c alone by
default: the others are loopback's goals).

The "× tar" column holds each row against `tar|ssh|tar` of the same tree, link and
direction, measured in the same run.

`--tiny` (CI's smoke run: no root, no ssh) pushes trees (a) and (b) at a few MiB with
swjob and the iroh floor only, into a temp dir it removes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
NS_OP, NS_NODE = "swjob-bench-op", "swjob-bench-node"
IP_OP, IP_NODE = "10.203.0.1", "10.203.0.2"


# ---- the two swjob sides, each its own process -----------------------------------------


def _peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM). Not ru_maxrss: Linux carries it over fork and
    exec, so a side started by the bench (which held 256 MiB making tree a) reported the
    bench's 279 MB whatever it used itself."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _helpers_cpu_s() -> float:
    """User + system CPU seconds of this process's landing processes (agent/transfer/
    landproc.py), those still running and those ended (its only children then: the
    operator asks before it reaps the agent): each side's CPU counts them with its own."""
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        from agent.transfer.landproc import pids
    except ImportError:  # a checkout from before them
        return ended.ru_utime + ended.ru_stime
    total = 0
    for pid in pids():
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
    return ended.ru_utime + ended.ru_stime + total / os.sysconf("SC_CLK_TCK")


async def _agent_main(ticket: str, workdir: Path) -> None:
    from agent import endpoint
    from agent.protocol import XFER_ALPN
    from agent.transfer.server import serve_transfer

    ep = await endpoint.bind(accept=False)
    conn = await ep.connect(endpoint.addr_from_ticket(ticket), XFER_ALPN)
    await serve_transfer(conn, workdir)
    await ep.close()
    cpu_s = _cpu_s() + _helpers_cpu_s()
    print(json.dumps({"rss_mb": _peak_rss_mb(), "cpu_s": cpu_s}), flush=True)


class _Link:
    def __init__(self, conn: object) -> None:
        self.conn = conn

    async def open_bi(self) -> object:
        return await self.conn.open_bi()  # type: ignore[attr-defined]


async def _operator_main(src: Path, dst: Path, node_ns: str | None, pull: bool) -> None:
    """Push `src` into the agent's workdir `dst`; with `pull`, the agent serves `src`'s
    parent as its workdir and the operator pulls `src` as a run's output into `dst`."""
    from agent import endpoint
    from agent.transfer.memory import share_one_arena
    from engine.run.transfer import pull_outputs, push_workspace

    share_one_arena()  # as the operator's Engine.start does
    ep = await endpoint.bind(accept=True)
    workdir = src.parent if pull else dst
    cmd = [sys.executable, str(HERE), "--agent", endpoint.ticket_of(ep), str(workdir)]
    env = dict(os.environ, SWJOB_IROH_BIND=f"{IP_NODE}:0" if node_ns else "127.0.0.1:0")
    agent = subprocess.Popen(_in_ns(node_ns, cmd), stdout=subprocess.PIPE, env=env, text=True)
    try:
        conn = await (await (await ep.accept_next()).accept()).connect()
        started = time.perf_counter()
        if pull:
            await pull_outputs(_Link(conn), [src.name], dst, lambda p: None)
        else:
            await push_workspace(_Link(conn), src, [], lambda p: None)
        seconds = time.perf_counter() - started
        op_cpu = _cpu_s() + _helpers_cpu_s()  # a pull's landers are the operator's
        conn.close(0, b"done")
        out, _ = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    await ep.close()
    node = json.loads(out.strip().splitlines()[-1])
    report = {"s": seconds, "op_rss": _peak_rss_mb(), "agent_rss": node["rss_mb"]}
    print(json.dumps(report | {"op_cpu": op_cpu, "agent_cpu": node["cpu_s"]}))


def _in_ns(ns: str | None, cmd: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd] if ns else cmd


def run_swjob(
    src: Path, dst: Path, shaped: bool, repo: Path = REPO, pull: bool = False
) -> dict[str, float]:
    """One push (or pull) by the swjob in `repo` (its own bench's operator, which starts
    its agent)."""
    env = dict(os.environ, SWJOB_IROH_RELAY="disabled", PYTHONPATH=str(repo))
    env["SWJOB_IROH_BIND"] = f"{IP_OP}:0" if shaped else "127.0.0.1:0"
    cmd = [sys.executable, str(repo / "tests/bench/transfer.py"), "--operator", str(src), str(dst)]
    cmd += ["--node-ns", NS_NODE] if shaped else []
    cmd += ["--pull"] if pull else []
    out = subprocess.run(
        _in_ns(NS_OP if shaped else None, cmd),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0:  # say why: the side's own traceback, not only its exit code
        raise RuntimeError(f"swjob push from {repo} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- baselines over a throwaway sshd ----------------------------------------------------


def ensure_tools() -> None:
    if shutil.which("rsync") and Path("/usr/sbin/sshd").exists() and shutil.which("ssh"):
        return
    subprocess.run(
        ["apt-get", "install", "-y", "rsync", "openssh-server", "openssh-client"],
        check=True,
        capture_output=True,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ssh(list[str]):
    """The ssh command (key, port, no host checks) and the throwaway sshd it reaches."""

    sshd_pid = 0

    def cpu_s(self) -> float:
        """CPU seconds of the sshd and every session it has reaped (each session's own
        process and what it ran: the node side of a reference tool), once no session is
        left to reap."""
        children = Path(f"/proc/{self.sshd_pid}/task/{self.sshd_pid}/children")
        deadline = time.monotonic() + 10
        while children.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.02)
        fields = Path(f"/proc/{self.sshd_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(map(int, fields[11:15])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def sshd(tmp: Path, host: str, ns: str | None) -> Iterator[Ssh]:
    """A throwaway sshd on `host`; yields the ssh command (key, port, no host checks)."""
    for name in ("host", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)], check=True
        )
    (tmp / "authorized_keys").write_text((tmp / "client.pub").read_text())
    port = _free_port()
    (tmp / "sshd_config").write_text(
        f"Port {port}\nListenAddress {host}\nHostKey {tmp / 'host'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPasswordAuthentication no\n"
        f"PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nPidFile {tmp / 'pid'}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    cmd = _in_ns(ns, ["/usr/sbin/sshd", "-D", "-e", "-f", str(tmp / "sshd_config")])
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    command = [
        "ssh",
        "-p",
        str(port),
        "-i",
        str(tmp / "client"),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "BatchMode=yes",
    ]
    ssh = Ssh(command)
    ssh.sshd_pid = proc.pid
    try:
        for _ in range(100):
            probe = subprocess.run(
                _in_ns(NS_OP if ns else None, [*ssh, host, "true"]), capture_output=True
            )
            if probe.returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("throwaway sshd did not come up")
        yield ssh
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def run_cmd(cmd: list[str], ns: str | None, ssh: Ssh) -> dict[str, float]:
    """Run a reference tool; its CPU on each side like swjob's: the operator's is what ran
    here (tar or rsync and the ssh client), the node's the sshd session and what it ran."""
    here, node = resource.getrusage(resource.RUSAGE_CHILDREN), ssh.cpu_s()
    started = time.perf_counter()
    subprocess.run(_in_ns(ns, cmd), check=True, capture_output=True, timeout=900)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    local = after.ru_utime + after.ru_stime - here.ru_utime - here.ru_stime
    return {"s": seconds, "op_cpu": local, "agent_cpu": ssh.cpu_s() - node}


def iroh_floor(size: int, land: Path | None = None) -> dict[str, float]:
    """The same bytes over bare iroh streams (no files, hashing or framing): the binding's
    ceiling for swjob, in the op/agent CPU columns as sender/receiver. With `land`, the
    receiver also writes them into files there: the ceiling of any push that lands them."""
    cmd = [sys.executable, str(HERE.parent / "iroh_floor.py"), "--mib", str(size >> 20)]
    cmd += ["--land", str(land)] if land else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {"s": got["s"], "op_cpu": got["send_cpu"], "agent_cpu": got["recv_cpu"]}


def rsync(
    ssh: Ssh,
    host: str,
    src: Path,
    dst: Path,
    z: bool,
    ns: str | None,
    pull: bool = False,
    compressor: str | None = None,
) -> dict:
    """rsync over ssh; `z`: compressed, with what the two ends negotiate (zstd level 3
    between rsync 3.2 or newer) or `compressor` (zlib: what an rsync before 3.2 sends)."""
    flags = ["-az" if z else "-a", *([f"--compress-choice={compressor}"] if compressor else [])]
    ends = [f"{host}:{src}/", f"{dst}/"] if pull else [f"{src}/", f"{host}:{dst}/"]
    return run_cmd(["rsync", *flags, "-e", " ".join(ssh), *ends], ns, ssh)


def tar_ssh(ssh: Ssh, host: str, src: Path, dst: Path, ns: str | None, pull: bool = False) -> dict:
    read, write = f"tar -C {src} -cf - .", f"mkdir -p {dst} && tar -C {dst} -xf -"
    if pull:
        pipeline = f"{' '.join(ssh)} {host} '{read}' | ({write})"
    else:
        pipeline = f"{read} | {' '.join(ssh)} {host} '{write}'"
    return run_cmd(["sh", "-c", pipeline], ns, ssh)


# ---- trees and the shaped link ----------------------------------------------------------


# per tree: (dirs, files per dir, bytes per file), full and --tiny (tree c is site-packages)
SIZES = {
    False: {"a": (1, 4, 256 << 20), "b": (200, 100, 4096), "d": (1000, 100, 1024)},
    True: {"a": (1, 4, 1 << 20), "b": (4, 10, 4096), "d": (4, 10, 1024)},
}


def make_tree(kind: str, root: Path, tiny: bool = False) -> Path:
    tree = root / f"tree-{kind}"
    if tree.exists():
        return tree
    tree.mkdir()
    if kind == "a":
        _, files, size = SIZES[tiny]["a"]
        for i in range(files):
            (tree / f"big{i}.bin").write_bytes(os.urandom(size))
    elif kind in ("b", "d"):
        dirs, per_dir, size = SIZES[tiny][kind]
        for d in range(dirs):
            (tree / f"d{d:03}").mkdir()
            for i in range(per_dir):
                (tree / f"d{d:03}" / f"f{i:03}").write_bytes(os.urandom(size))
    else:
        import site

        shutil.copytree(site.getsitepackages()[0], tree, symlinks=True, dirs_exist_ok=True)
    return tree


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@contextlib.contextmanager
def node_disk(work: Path, size: str = "6G") -> Iterator[Path]:
    """A fresh journaled ext4 in a sparse file under `work`, loop-mounted: the disk every
    tool lands on (the module's docstring says why). Its inode tables are written at once,
    so no background initialisation competes with the tools."""
    image, mount = work / "node-disk.img", work / "node-disk"
    image.unlink(missing_ok=True)
    _sh("truncate", "-s", size, str(image))
    _sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image))
    mount.mkdir(exist_ok=True)
    _sh("mount", "-o", "loop", str(image), str(mount))
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)
        image.unlink(missing_ok=True)


@contextlib.contextmanager
def shaped_link(rate: str = "100mbit") -> Iterator[None]:
    """Two namespaces joined by a veth, each end shaped with tbf; removed on exit."""
    try:
        _sh("ip", "netns", "add", NS_OP)
        _sh("ip", "netns", "add", NS_NODE)
        _sh(
            "ip",
            "link",
            "add",
            "swb-op",
            "netns",
            NS_OP,
            "type",
            "veth",
            "peer",
            "name",
            "swb-node",
            "netns",
            NS_NODE,
        )
        for ns, dev, ip in ((NS_OP, "swb-op", IP_OP), (NS_NODE, "swb-node", IP_NODE)):
            _sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            _sh(
                "tc",
                "-n",
                ns,
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                "256kb",
                "latency",
                "50ms",
            )
        yield
    finally:
        for ns in (NS_OP, NS_NODE):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


# ---- the run ----------------------------------------------------------------------------


def measure(tools: dict, reps: int, dst: Path, ns: str | None = None) -> dict[str, dict]:
    """Per tool: median seconds over `reps` runs (fresh destination each time), the peak
    RSS seen and median CPU. The tools take turns within each repetition, so a change in
    the machine's load falls on all of them alike and their ratios stay fair, and each
    repetition starts with the next tool: two identical swjobs measured in a fixed order
    differed by 10 % on tree c (loopback; 1.81 against 1.63 s), the first always slower."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in tools}
    names = list(tools)
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            subprocess.run(_in_ns(ns, ["rm", "-rf", str(dst)]), check=True)
            runs[name].append(tools[name]())
    return {name: _summary(got) for name, got in runs.items()}


def _summary(runs: list[dict[str, float]]) -> dict[str, float]:
    out = {"s": statistics.median(r["s"] for r in runs)}
    for key in ("op_rss", "agent_rss"):
        if key in runs[0]:
            out[key] = max(r[key] for r in runs)
    for key in ("op_cpu", "agent_cpu"):
        if key in runs[0]:
            out[key] = statistics.median(r[key] for r in runs)
    return out


def swjobs(shaped: bool, src: Path, dst: Path, before: Path | None, pull: bool) -> dict:
    """The swjob tools: this tree's, and with `before` another checkout's taking turns with it."""
    tools = {"swjob": lambda: run_swjob(src, dst, shaped, pull=pull)}
    if before is not None:
        tools["swjob before"] = lambda: run_swjob(src, dst, shaped, before, pull)
    return tools


def bench(
    trees: list[str],
    links: list[str],
    reps: int,
    work: Path,
    land: Path,
    tiny: bool,
    before: Path | None = None,
    directions: tuple[str, ...] = ("push",),
    shaped_trees: tuple[str, ...] = ("c",),
) -> list[tuple]:
    """The rows for `trees` (made under `work`) over `links`, each tool landing under `land`.
    A row: (tree, link, direction, tool, bytes, figures)."""
    rows = []
    for kind in trees:
        src = make_tree(kind, work, tiny)
        size = sum(f.stat().st_size for f in src.rglob("*") if f.is_file() and not f.is_symlink())
        for direction in directions:
            pull = direction == "pull"
            dst = land / f"dst-{kind}"
            if tiny:
                got = bench_tiny(kind, src, size, dst, pull)
                rows += _rows(kind, "loopback", direction, size, got)
                continue
            if "loopback" in links:
                got = bench_loopback(kind, src, size, reps, dst, before, pull)
                rows += _rows(kind, "loopback", direction, size, got)
            if kind in shaped_trees and "shaped" in links:
                got = bench_shaped(src, reps, land / "dst-shaped", before, pull)
                rows += _rows(kind, "100 Mbit", direction, size, got)
    return rows


def _rows(kind: str, link: str, direction: str, size: int, got: dict[str, dict]) -> list[tuple]:
    return [(kind, link, direction, name, size, m) for name, m in got.items()]


def bench_loopback(
    kind: str, src: Path, size: int, reps: int, dst: Path, before: Path | None, pull: bool
) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as keys, sshd(Path(keys), "127.0.0.1", None) as ssh:
        tools = {
            **swjobs(False, src, dst, before, pull),
            "rsync -a": lambda: rsync(ssh, "127.0.0.1", src, dst, False, None, pull),
            "tar|ssh|tar": lambda: tar_ssh(ssh, "127.0.0.1", src, dst, None, pull),
        }
        if kind == "a" and not pull:
            tools["iroh floor"] = lambda: iroh_floor(size)
            tools[LANDING_FLOOR] = lambda: iroh_floor(size, dst)
        if kind == "c":
            tools["rsync -az"] = lambda: rsync(ssh, "127.0.0.1", src, dst, True, None, pull)
        got = measure(tools, reps, dst)
    subprocess.run(["rm", "-rf", str(dst)], check=True)
    return got


def bench_tiny(kind: str, src: Path, size: int, dst: Path, pull: bool) -> dict[str, dict]:
    """swjob (and the floors for tree a) only: what keeps the bench's own code running in CI."""
    tools = {"swjob": lambda: run_swjob(src, dst, False, pull=pull)}
    if kind == "a" and not pull:
        tools["iroh floor"] = lambda: iroh_floor(size)
        tools[LANDING_FLOOR] = lambda: iroh_floor(size, dst)
    return measure(tools, 1, dst)


def bench_shaped(src: Path, reps: int, dst: Path, before: Path | None, pull: bool) -> dict:
    with (
        shaped_link(),
        tempfile.TemporaryDirectory() as keys,
        sshd(Path(keys), IP_NODE, NS_NODE) as ssh,
    ):
        tools = {
            **swjobs(True, src, dst, before, pull),
            "rsync -az": lambda: rsync(ssh, IP_NODE, src, dst, True, NS_OP, pull),
            "rsync -az zlib": lambda: rsync(ssh, IP_NODE, src, dst, True, NS_OP, pull, "zlib"),
            "tar|ssh|tar": lambda: tar_ssh(ssh, IP_NODE, src, dst, NS_OP, pull),
        }
        return measure(tools, reps, dst)


_COLUMNS = (("op_rss", 10, 0), ("agent_rss", 13, 0), ("op_cpu", 9, 1), ("agent_cpu", 12, 1))
# what each tree's swjob row is held against, per link: the binding's floor on loopback,
# rsync -az over the shaped link
REFERENCE = {"loopback": "iroh floor", "100 Mbit": "rsync -az"}
LANDING_FLOOR = "floor+land"  # the floor writing what it reads into files on the node disk
TAR = "tar|ssh|tar"


def _ratios(rows: list[tuple], ref: dict[str, str]) -> dict[tuple[str, ...], float]:
    """Each row's median seconds over its reference's (per link), measured in the same run."""
    seconds = {(kind, link, way, name): m["s"] for kind, link, way, name, _, m in rows}
    out = {}
    for kind, link, way, name in seconds:
        against = seconds.get((kind, link, way, ref[link]))
        if against and name != ref[link]:
            out[(kind, link, way, name)] = seconds[(kind, link, way, name)] / against
    return out


def _ratio_text(ratio: float | None) -> str:
    return f"{ratio:6.2f}" if ratio is not None else f"{'-':>6}"


def print_table(rows: list[tuple]) -> None:
    ratios = _ratios(rows, REFERENCE)
    tars = _ratios(rows, {link: TAR for link in REFERENCE})
    print(
        f"{'tree':4} {'link':9} {'dir':4} {'tool':12} {'median s':>9} {'× ref':>6} {'× tar':>6} "
        f"{'MiB/s':>8} {'op RSS MB':>10} {'agent RSS MB':>13} {'op CPU s':>9} {'agent CPU s':>12}"
    )
    for kind, link, way, name, size, m in rows:
        rss = " ".join(
            f"{m[key]:{width}.{digits}f}" if key in m else f"{'-':>{width}}"
            for key, width, digits in _COLUMNS
        )
        key = (kind, link, way, name)
        print(
            f"{kind:4} {link:9} {way:4} {name:12} {m['s']:9.2f} {_ratio_text(ratios.get(key))} "
            f"{_ratio_text(tars.get(key))} {size / m['s'] / 2**20:8.1f} {rss}"
        )
    print(
        "\n× ref: median seconds over the same run's iroh floor (loopback) or rsync -az "
        "(100 Mbit); × tar: over the same run's tar|ssh|tar, same tree, link and direction;\n"
        "RSS, CPU: peak (VmHWM) and CPU seconds of the operator and agent processes "
        "(a reference's: what ran on the operator's side, tar or rsync and ssh, and the "
        "node's sshd session with what it ran) "
        f"(load average at the end: {os.getloadavg()[0]:.1f})"
    )
    seconds = {(kind, name): m["s"] for kind, link, way, name, _, m in rows if link == "loopback"}
    if ("a", LANDING_FLOOR) in seconds and ("a", "swjob") in seconds:
        landing = seconds[("a", "swjob")] / seconds[("a", LANDING_FLOOR)]
        print(f"tree a: swjob at {landing:.2f}× the landing floor ({LANDING_FLOOR})")
    print(f"reproduce: python {' '.join(sys.argv)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default="a,b,c")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--links", default="loopback,shaped", help="loopback, shaped")
    parser.add_argument("--shaped-trees", default="c", help="trees also over the shaped link")
    parser.add_argument("--directions", default="push", help="push, pull (outputs), or both")
    parser.add_argument("--land", choices=("node-disk", "work"), default="node-disk")
    parser.add_argument("--work", default="/tmp/swjob-bench")
    parser.add_argument("--agent", nargs=2, metavar=("TICKET", "WORKDIR"))
    parser.add_argument("--operator", nargs=2, metavar=("SRC", "DST"))
    parser.add_argument("--pull", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--node-ns")
    parser.add_argument("--tiny", action="store_true", help="CI smoke: a few MiB, no root")
    parser.add_argument(
        "--before", type=Path, help="another swjob checkout, pushing in turn with this one"
    )
    args = parser.parse_args()
    if not set(args.links.split(",")) <= {"loopback", "shaped"}:
        parser.error(f"--links takes loopback and/or shaped, not {args.links!r}")
    directions = tuple(args.directions.split(","))
    if not set(directions) <= {"push", "pull"}:
        parser.error(f"--directions takes push and/or pull, not {args.directions!r}")
    if args.agent:
        asyncio.run(_agent_main(args.agent[0], Path(args.agent[1])))
    elif args.operator:
        src, dst = Path(args.operator[0]), Path(args.operator[1])
        asyncio.run(_operator_main(src, dst, args.node_ns, args.pull))
    elif args.tiny:
        with tempfile.TemporaryDirectory(prefix="swjob-bench-") as work:
            trees, both = ["a", "b"], ("push", "pull")
            print_table(bench(trees, ["loopback"], 1, Path(work), Path(work), True, None, both))
    else:
        ensure_tools()
        work = Path(args.work)
        work.mkdir(parents=True, exist_ok=True)
        disk = node_disk(work) if args.land == "node-disk" else contextlib.nullcontext(work)
        with disk as land:
            trees, links = args.trees.split(","), args.links.split(",")
            before = args.before.resolve() if args.before else None
            shaped = tuple(args.shaped_trees.split(","))
            rows = bench(trees, links, args.reps, work, land, False, before, directions, shaped)
        print_table(rows)


if __name__ == "__main__":
    main()
