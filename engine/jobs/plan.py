"""The preview of a push, shown before any node is rented (`swjob plan JOB`, the submit modal).

It walks the workspace exactly as the push will (same excludes, same walk), so what
it shows is what will be sent: file count, size, an estimate of the compressed size
(from sampling the files), the largest files, and warnings about files that look
like secrets or are unusually large — the moment to exclude them is before paying.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.redact import Redactor
from agent.transfer.compress import known_incompressible, maybe_compress
from agent.transfer.walk import Entry, compile_excludes, walk_tree

SECRET_PATTERNS = [
    ".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_dsa*", "id_ecdsa*",
    "id_ed25519*", "credentials*.json", "service-account*.json", ".netrc", ".pypirc",
    ".aws/credentials", ".git-credentials", ".npmrc",
]  # fmt: skip
LARGE_FILE = 100 * 1024 * 1024
LARGE_GIT = 50 * 1024 * 1024
_SAMPLE_FILES = 64
_SAMPLE_BYTES = 64 * 1024
_TOP = 10


@dataclass(frozen=True)
class Plan:
    root: str
    files: int
    bytes: int
    compressed_estimate: int
    largest: list[tuple[str, int]]
    warnings: list[str]
    explanations: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    excluded: int = 0


def _estimate(root: Path, files: list[Entry]) -> int:
    """Compressed size estimate: sampled ratio for compressible files, 1.0 for known-packed ones."""
    plain = [e for e in files if not known_incompressible(e.path) and e.size > 0]
    packed_bytes = sum(e.size for e in files) - sum(e.size for e in plain)
    sample = random.Random(0).sample(plain, min(_SAMPLE_FILES, len(plain)))
    raw = squeezed = 0
    for entry in sample:
        with open(root / entry.path, "rb") as fh:
            data = fh.read(_SAMPLE_BYTES)
        raw += len(data)
        squeezed += len(maybe_compress(data)[0])
    ratio = squeezed / raw if raw else 1.0
    return packed_bytes + int(sum(e.size for e in plain) * ratio)


def _warnings(files: list[Entry]) -> list[str]:
    secrets = GitIgnoreSpec.from_lines(SECRET_PATTERNS)
    out = [
        f"looks like a secret: {e.path} (exclude it?)" for e in files if secrets.match_file(e.path)
    ]
    out += [f"large file: {e.path} ({_human(e.size)})" for e in files if e.size >= LARGE_FILE]
    git = sum(e.size for e in files if e.path.startswith(".git/"))
    if git >= LARGE_GIT:
        out.append(f".git is {_human(git)} and will be pushed (add '/.git' to exclude?)")
    return out


def _explain(entries: list[Entry], excluded: list[tuple[str, int]], exclude: list[str]) -> list:
    spec = compile_excludes(exclude)
    why = [(path, f"excluded by {exclude[index]!r}") for path, index in excluded]
    for entry in entries:
        check = spec.check_file(entry.path + "/" if entry.kind == "dir" else entry.path)
        reason = (
            f"kept (re-included by {exclude[check.index]!r})" if check.index is not None else "kept"
        )
        why.append((entry.path, reason))
    return sorted(why)


def plan_workspace(root: Path, exclude: list[str], secrets: Iterable[str] = ()) -> Plan:
    """What a push of `root` with `exclude` would send, without sending anything. Every
    path and line in it is masked for `secrets` (the job's env values), as a run shows
    them: a file named after a secret is no less a secret before the run."""
    redact = Redactor(secrets)
    walk = walk_tree(root, exclude)
    files = [e for e in walk.entries if e.kind == "file"]
    largest = sorted(files, key=lambda e: e.size, reverse=True)[:_TOP]
    warnings = _warnings(files) + [f"will not be pushed: {r}" for r in walk.refused]
    explanations = _explain(walk.entries, walk.excluded, exclude)
    return Plan(
        root=redact(str(root)),
        files=len(files),
        bytes=sum(e.size for e in files),
        compressed_estimate=_estimate(root, files),
        largest=[(redact(e.path), e.size) for e in largest],
        warnings=[redact(w) for w in warnings],
        explanations=[(redact(path), redact(why)) for path, why in explanations],
        excluded=len(walk.excluded),
    )


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def render_plan(plan: Plan, *, explain: bool, console: Console) -> None:
    """The CLI's `swjob plan` output: summary, largest files, warnings, rules with --explain."""
    console.print(
        f"[bold]{plan.files}[/] files, [bold]{_human(plan.bytes)}[/] "
        f"(~{_human(plan.compressed_estimate)} compressed) from {escape(plan.root)}; "
        f"{plan.excluded} paths excluded"
    )
    table = Table("largest files", "size", box=None)
    for path, size in plan.largest:
        table.add_row(escape(path), _human(size))
    console.print(table)
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    if explain:
        rules = Table("path", "rule", box=None)
        for path, why in plan.explanations:
            rules.add_row(escape(path), escape(why))
        console.print(rules)
