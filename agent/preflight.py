"""The host pre-flight: before any of the run's files reach a rented node, check that the
node is what its pool asked for.

Hosts come up with GPUs missing, a driver that no longer answers, CUDA broken, a disk
smaller than paid for or a clock hours off; a job finds out only after its workspace was
pushed and its setup ran, and the node bills all the while. So the engine asks once the
agent has joined (Preflight) and the node answers with each check (PreflightDone):

- `driver`: nvidia-smi exists and answers within NVIDIA_SMI_TIMEOUT_S;
- `gpus`: it shows exactly the pool's `gpu_count`, each with the `gpu_memory_mb` asked
  (within MEMORY_SLACK: boards report a little under their nominal size);
- `cuda`: a tiny kernel run by torch in the image's `python3` — where the image has no
  python3 or no torch there is no way to run one without shipping CUDA code, so the check
  is skipped and says so (a skip is no failure);
- `disk`: free space in the workdir ≥ the pool's `disk_mb`;
- `clock`: the node's clock within `clock_skew_max_s` of the operator's.

GPU checks run only when the pool asks for GPUs. What nvidia-smi prints is untrusted
(agent/gpu.py parses it, bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from pathlib import Path

from agent import credentials, facts, gpu
from agent.protocol import GpuSample, Preflight, PreflightCheck

CHECKS = ("driver", "gpus", "cuda", "disk", "clock")
NVIDIA_SMI_TIMEOUT_S = 15.0
CUDA_TIMEOUT_S = 120.0  # importing torch and creating a CUDA context: tens of seconds at worst
MEMORY_SLACK = 0.95
OUTPUT_MAX = 64 * 1024
NO_DEVICES = "No devices were found"  # nvidia-smi's words (exit 6) when the driver sees none
NO_TORCH = 3  # the CUDA probe's exit code when torch cannot be imported
CUDA_PROBE = f"""
import sys
try:
    import torch
except Exception:
    sys.exit({NO_TORCH})
x = torch.ones(4, device="cuda")
print(torch.__version__, torch.cuda.get_device_name(0), float((x * 2).sum().item()))
"""


async def run(request: Preflight, workdir: Path) -> list[PreflightCheck]:
    """Every check the request calls for, in CHECKS order."""
    checks: list[PreflightCheck] = []
    if request.gpu_count > 0:
        checks += await gpu_checks(request)
    if request.disk_mb:
        checks.append(disk_check(facts.disk_free_mb(workdir), request.disk_mb))
    checks.append(clock_check(time.time(), request.operator_time, request.clock_skew_max_s))
    return checks


async def gpu_checks(request: Preflight) -> list[PreflightCheck]:
    """driver, gpus and (once those pass) cuda."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return [PreflightCheck(name="driver", ok=False, detail="no nvidia-smi: no NVIDIA driver")]
    args = [exe, f"--query-gpu={gpu.QUERY}", "--format=csv,noheader,nounits"]
    code, out = await _output(args, NVIDIA_SMI_TIMEOUT_S)
    driver = driver_check(code, out)
    if not driver.ok:
        return [driver]
    gpus = [] if NO_DEVICES in out else gpu.parse(out)
    shown = gpus_check(gpus, request.gpu_count, request.gpu_memory_mb)
    if not shown.ok:
        return [driver, shown]
    return [driver, shown, await cuda_check()]


def driver_check(code: int | None, out: str) -> PreflightCheck:
    """Whether nvidia-smi answered: exit 0, or "no devices" (the driver answered: zero)."""
    if code is None:
        said = f"nvidia-smi did not answer within {NVIDIA_SMI_TIMEOUT_S:g} s"
        return PreflightCheck(name="driver", ok=False, detail=said)
    if code == 0 or NO_DEVICES in out:
        return PreflightCheck(name="driver", ok=True, detail="nvidia-smi answered")
    said = f"nvidia-smi failed (exit {code}): {_last_line(out) or 'no output'}"
    return PreflightCheck(name="driver", ok=False, detail=said)


def gpus_check(gpus: list[GpuSample], asked: int, memory_mb: int | None) -> PreflightCheck:
    """Exactly `asked` GPUs visible, each with at least MEMORY_SLACK of `memory_mb`."""
    if len(gpus) != asked:
        said = f"{len(gpus)} GPU{'s' * (len(gpus) != 1)} visible, the pool asked for {asked}"
        return PreflightCheck(name="gpus", ok=False, detail=said)
    if memory_mb:
        small = [g for g in gpus if (g.mem_total_mb or 0) < memory_mb * MEMORY_SLACK]
        if small:
            has = ", ".join(f"GPU {g.index}: {g.mem_total_mb or 0:.0f} MB" for g in small)
            said = f"{has}; the pool asked for {memory_mb} MB each"
            return PreflightCheck(name="gpus", ok=False, detail=said)
    sizes = sorted({f"{g.mem_total_mb or 0:.0f} MB" for g in gpus})
    return PreflightCheck(name="gpus", ok=True, detail=f"{asked} visible ({', '.join(sizes)})")


async def cuda_check() -> PreflightCheck:
    """A tiny kernel through torch in the image's python3, where it has one."""
    python = shutil.which("python3")
    if python is None:
        return _skipped("cuda", "not checked: the image has no python3 to run a CUDA check")
    code, out = await _output([python, "-c", CUDA_PROBE], CUDA_TIMEOUT_S)
    return cuda_verdict(code, out)


def cuda_verdict(code: int | None, out: str) -> PreflightCheck:
    if code == NO_TORCH:
        return _skipped("cuda", "not checked: no torch in the image's python3")
    if code == 0:
        return PreflightCheck(name="cuda", ok=True, detail=f"kernel ran: {_last_line(out)}")
    if code is None:
        said = f"the CUDA check did not end within {CUDA_TIMEOUT_S:g} s"
        return PreflightCheck(name="cuda", ok=False, detail=said)
    said = f"the CUDA check failed (exit {code}): {_last_line(out) or 'no output'}"
    return PreflightCheck(name="cuda", ok=False, detail=said)


def disk_check(free_mb: int, asked_mb: int) -> PreflightCheck:
    ok = free_mb >= asked_mb
    said = f"{free_mb} MB free, the pool asked for {asked_mb} MB"
    return PreflightCheck(name="disk", ok=ok, detail=said)


def clock_check(node_t: float, operator_t: float, max_skew_s: float) -> PreflightCheck:
    """The node's clock against the operator's at sending (the request's transit counts
    as skew: milliseconds against a bound of minutes)."""
    skew = node_t - operator_t
    ahead = "ahead of" if skew >= 0 else "behind"
    said = f"{abs(skew):.1f} s {ahead} the operator's"
    ok = abs(skew) <= max_skew_s
    return PreflightCheck(
        name="clock", ok=ok, detail=said if ok else f"{said} (over {max_skew_s:g} s)"
    )


def _skipped(name: str, detail: str) -> PreflightCheck:
    return PreflightCheck(name=name, ok=True, detail=detail, skipped=True)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


async def _output(argv: list[str], timeout_s: float) -> tuple[int | None, str]:
    """Exit code (None: killed at `timeout_s`) and at most OUTPUT_MAX bytes of stdout and
    stderr together; run without the node's secrets in its environment."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=credentials.scrubbed(os.environ),
        start_new_session=True,
    )
    assert proc.stdout is not None
    out = b""
    try:
        async with asyncio.timeout(timeout_s):
            while chunk := await proc.stdout.read(OUTPUT_MAX):
                out = (out + chunk)[:OUTPUT_MAX]
            await proc.wait()
    except TimeoutError:
        pass
    finally:  # timed out, or the check cancelled (the agent leaving): its group goes too
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
    if proc.returncode is None:
        await proc.wait()
        return None, out.decode(errors="replace")
    return proc.returncode, out.decode(errors="replace")
