"""Secrets in every shape, through a real `swjob run`: a multi-line env value
(a PEM key) printed whole and line by line, and a secret printed right across the
agent's 64 KiB line cut. No line of the key and no piece of the secret (6 characters or
more) may show in what `swjob run` printed, in the run's logs or in its events."""

from __future__ import annotations

from agent.lines import MAX_LINE
from engine.state.paths import state_dir
from tests.support.cli import swjob, swjob_run
from tests.support.hostile import PEM, SECRET, pieces


def test_multiline_and_straddling_secrets_never_show(tmp_path, make_job, record_fault) -> None:
    pad = MAX_LINE - len(SECRET) // 2  # the cut falls in the middle of the secret
    job = make_job(
        env={"PEM_KEY": PEM, "API_TOKEN": SECRET},
        run=(
            'echo "$PEM_KEY"; echo "$PEM_KEY" >&2; '
            f"head -c {pad} /dev/zero | tr '\\0' a; echo \"$API_TOKEN and more\""
        ),
    )
    code, printed = swjob_run(tmp_path, job.source)
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    texts = {"printed": printed, "events": (run_dir / "events.jsonl").read_text()}
    texts |= {p.name: p.read_text() for p in (run_dir / "logs").iterdir()}
    assert code == 0 and "*** and more" in printed, printed[-500:]
    assert texts["printed"].count("| ***") >= 4  # each PEM line masked, on stdout …
    assert texts["printed"].count("! ***") >= 4  # … and on stderr
    shown = {
        name: [line for line in PEM.splitlines() if line in text] + pieces(SECRET, text)
        for name, text in texts.items()
    }
    assert {name: found for name, found in shown.items() if found} == {}
    record_fault(
        "job prints a 4-line PEM env value and a secret across the 64 KiB line cut",
        None,
        "every PEM line and the whole secret shown as *** in CLI, logs and events",
    )


def test_an_output_named_after_a_secret_lands_real_but_is_shown_masked(
    tmp_path, make_job, record_fault
) -> None:
    job = make_job(
        env={"API_TOKEN": SECRET},
        run='mkdir -p res; echo data > "res/out-$API_TOKEN.txt"; echo plain > res/plain.txt',
        outputs=["res/*.txt"],
    )
    code, printed = swjob_run(tmp_path, job.source)
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    landed = run_dir / "outputs" / "res" / f"out-{SECRET}.txt"
    assert code == 0 and landed.read_text() == "data\n", printed  # the real name, on disk
    manifest = (run_dir / "manifest.json").read_text()
    assert "res/out-***.txt" in manifest and "res/plain.txt" in manifest
    recorded = {
        "printed": printed,
        "manifest": manifest,
        "events": (run_dir / "events.jsonl").read_text(),
        "run.json": (run_dir / "run.json").read_text(),
    }
    assert {name for name, text in recorded.items() if pieces(SECRET, text)} == set()
    record_fault(
        "job names an output file after its secret",
        None,
        "landed under its real name; manifest, events, run.json and CLI show ***",
    )


def test_a_declared_output_naming_a_secret_that_matched_nothing_is_shown_masked(
    tmp_path, make_job, record_fault
) -> None:
    """An output pattern that holds a secret and matches nothing: manifest.json always
    masked it, but the run's Finished event, run.json, the run index and `swjob run`'s
    "missing outputs" line carried it raw."""
    job = make_job(
        env={"API_TOKEN": SECRET}, run="echo ok > here.txt",
        outputs=["here.txt", f"never-{SECRET}.bin"],
    )  # fmt: skip
    code, printed = swjob_run(tmp_path, job.source)
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert code == 0 and "missing outputs: never-***.bin" in printed, printed[-500:]
    recorded = {
        "printed": printed,
        "manifest": (run_dir / "manifest.json").read_text(),
        "events": (run_dir / "events.jsonl").read_text(),
        "run.json": (run_dir / "run.json").read_text(),
        "runs.sqlite": (state_dir() / "runs.sqlite").read_bytes().decode("latin-1"),
    }
    assert {name for name, text in recorded.items() if pieces(SECRET, text)} == set()
    record_fault(
        "job declares an output whose pattern holds its secret, and it matches nothing",
        None,
        "missing output shown as *** in CLI, events, run.json, index and manifest",
    )


def test_swjob_plan_masks_workspace_paths_naming_a_secret(tmp_path, make_job) -> None:
    """`swjob plan` lists the largest files, refusals and (--explain) every path: one
    named after an env value was printed raw, though a run masks it everywhere."""
    job = make_job(
        {f"data-{SECRET}.txt": "x" * 100, f"skip-{SECRET}": "s"},
        env={"API_TOKEN": SECRET}, run="true",
        workspace={"workdir": ".", "exclude": [f"skip-{SECRET}"]},
    )  # fmt: skip
    (job.source.parent / f"link-{SECRET}").symlink_to("/etc/passwd")
    done = swjob("plan", str(job.source), "--explain", cwd=tmp_path)
    printed = done.stdout + done.stderr
    assert done.returncode == 0 and "data-***.txt" in printed, printed
    assert "link-***" in printed and "skip-***" in printed, printed
    assert pieces(SECRET, printed) == []
