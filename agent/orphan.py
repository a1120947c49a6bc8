"""What a node does once its operator has been silent for good (the orphan timeout).

A node nobody owns must not bill forever. By then the agent has stopped its job; this
module releases the node itself, as the provider asked on the command line:

- `exit`: nothing more (the provider cleans up).
- `remove-root`: the local pool — the node's directory goes (work, logs, journal).
- `destroy-instance`: Vast.ai — destroy the own instance with the container's own
  credential. Vast sets `CONTAINER_ID` and `CONTAINER_API_KEY` in the environment of
  the container's PID 1 (shells and on-start scripts may not inherit them), and that
  key acts only on this one instance. If the destroy is refused, the instance is
  stopped instead (it then bills only its storage until someone destroys it).
- `terminate-pod`: RunPod — terminate the own pod with its own credential: RunPod sets
  `RUNPOD_POD_ID` and a pod-scoped `RUNPOD_API_KEY` in the pod's environment (kept off
  the job's, agent/credentials.py); one GraphQL mutation, `podTerminate`.

The agent must not import the `vastai` SDK (it is not on a node), so this speaks the
two REST calls with urllib. The key never appears in what this returns or logs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from agent import credentials

ACTIONS = ("exit", "remove-root", "destroy-instance", "terminate-pod")
DESTROYS = ("destroy-instance", "terminate-pod")  # the actions that end a rented node
VAST_URL = "https://console.vast.ai"
RUNPOD_URL = "https://api.runpod.io"
POD_ENV, POD_KEY_ENV = "RUNPOD_POD_ID", "RUNPOD_API_KEY"
HTTP_TIMEOUT_S = 30.0
ID_ENV, KEY_ENV = "CONTAINER_ID", "CONTAINER_API_KEY"


def parse_environ(raw: bytes) -> dict[str, str]:
    """A /proc/<pid>/environ blob (NUL-separated KEY=VALUE) as a dict."""
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def container_credential(
    pid1_environ: Path = Path("/proc/1/environ"),
    own: Mapping[str, str] | None = None,
    names: tuple[str, str] = (ID_ENV, KEY_ENV),
) -> tuple[str, str] | None:
    """(instance id, scoped key) from PID 1's environment, else from the one this agent
    was started with (agent/credentials.py keeps it off the job's), else None."""
    try:
        first = parse_environ(pid1_environ.read_bytes())
    except OSError:
        first = {}
    ident, key = names
    for env in (first, credentials.kept_env() if own is None else own):
        if env.get(ident) and env.get(key):
            return env[ident], env[key]
    return None


def _call(url: str, method: str, key: str, body: dict[str, str]) -> tuple[int, bool]:
    """The HTTP status of one request, and whether it was done: a 2xx whose body says
    `success: false` was refused (Vast's CLI reads it so). urllib is imported here, by
    the one agent in many that is orphaned: at start-up it is 20 ms of every agent's
    ~0.35 s of imports."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            return int(answer.status), not _says_refused(answer.read(64 * 1024))
    except urllib.error.HTTPError as exc:
        return int(exc.code), False


def _says_refused(body: bytes) -> bool:
    try:
        said = json.loads(body)
    except ValueError:
        return False
    return isinstance(said, dict) and (said.get("success") is False or bool(said.get("errors")))


def destroy_own_instance(api_url: str = VAST_URL) -> str:
    """Destroy this Vast instance, or stop it if the destroy is refused; says what happened."""
    credential = container_credential()
    if credential is None:
        return f"cannot destroy the own instance: {ID_ENV}/{KEY_ENV} not set"
    instance, key = credential
    url = f"{api_url.rstrip('/')}/api/v0/instances/{instance}/"
    try:
        status, done = _call(url, "DELETE", key, {})
        if (status < 300 and done) or status == 404:
            return f"destroyed own Vast.ai instance {instance}"
        stopped, halted = _call(url, "PUT", key, {"state": "stopped"})
    except (OSError, ValueError) as exc:
        return f"could not reach Vast.ai to destroy own instance {instance}: {type(exc).__name__}"
    why = f"HTTP {status}" + ("" if status >= 300 else " without success")
    if stopped < 300 and halted:
        return f"destroy of own Vast.ai instance {instance} refused ({why}); stopped it"
    return f"could not destroy ({why}) or stop (HTTP {stopped}) own Vast.ai instance {instance}"


def terminate_own_pod(api_url: str = RUNPOD_URL) -> str:
    """Terminate this RunPod pod with its own key; says what happened."""
    credential = container_credential(names=(POD_ENV, POD_KEY_ENV))
    if credential is None:
        return f"cannot terminate the own pod: {POD_ENV}/{POD_KEY_ENV} not set"
    pod, key = credential
    mutation = f"mutation {{ podTerminate(input: {{ podId: {json.dumps(pod)} }}) }}"
    try:
        status, done = _call(f"{api_url.rstrip('/')}/graphql", "POST", key, {"query": mutation})
    except (OSError, ValueError) as exc:
        return f"could not reach RunPod to terminate own pod {pod}: {type(exc).__name__}"
    if status < 300 and done:
        return f"terminated own RunPod pod {pod}"
    return f"could not terminate own RunPod pod {pod} (HTTP {status})"


def destroy_own(action: str, vast_url: str = VAST_URL, runpod_url: str = RUNPOD_URL) -> str:
    """The provider's way (`action`, one of DESTROYS) of ending the own rented node."""
    if action == "terminate-pod":
        return terminate_own_pod(runpod_url)
    return destroy_own_instance(vast_url)


def remove_root(root: Path) -> str:
    shutil.rmtree(root, ignore_errors=True)
    return f"removed the node directory {root}"
