"""Job files (spec §4): every rule of engine/jobs/jobspec.py, on real files in a temp dir."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pathspec
import pytest

from engine.jobs.jobspec import JobFileError, Workspace, load_job, parse_job

SPEC_EXAMPLE = """\
[job]
name = "airfrans_smoke_01"
setup = "uv sync --no-dev"
run = "uv run remote-run smoke-train configs/aggressive_smoke.toml"
workspace = { workdir = ".", exclude = ["/artifacts", "/.venv", "__pycache__"] }
outputs = ["metrics.jsonl", "final_metrics.json", "checkpoint_latest.pt"]
env = { HF_TOKEN = "hf_S3CR3T_value" }
"""
MINIMAL = '[job]\nname = "j"\nrun = "true"\n'
ONE_LINE = re.compile(r"^(?P<file>[^:\n]+)(?::(?P<line>\d+))?: (?P<field>[^:\n]+): [^\n]+$")


def write(folder: Path, text: str, name: str = "job.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def error_of(folder: Path, text: str) -> JobFileError:
    with pytest.raises(JobFileError) as info:
        load_job(write(folder, text))
    assert "\n" not in str(info.value)
    return info.value


def job_with(tmp_path: Path, extra: str) -> JobFileError:
    return error_of(tmp_path, MINIMAL + extra)


def test_spec_example_loads(tmp_path: Path) -> None:
    job = load_job(write(tmp_path, SPEC_EXAMPLE))
    assert job.name == "airfrans_smoke_01"
    assert job.setup == "uv sync --no-dev"
    assert job.run.startswith("uv run remote-run")
    assert job.workspace == Workspace(
        workdir=tmp_path.resolve(), exclude=["/artifacts", "/.venv", "__pycache__"]
    )
    assert job.outputs == ["metrics.jsonl", "final_metrics.json", "checkpoint_latest.pt"]
    assert job.env == {"HF_TOKEN": "hf_S3CR3T_value"}
    assert job.secrets() == ["hf_S3CR3T_value"]
    assert "S3CR3T" not in repr(job)  # a job that ends up in a traceback keeps its env
    assert job.source == tmp_path / "job.toml" and job.source.is_absolute()


def test_minimal_job_defaults(tmp_path: Path) -> None:
    job = load_job(write(tmp_path, MINIMAL))
    assert (job.setup, job.workspace, job.outputs, job.env) == (None, None, [], {})
    assert job.secrets() == []


def test_parse_job_matches_load_job(tmp_path: Path) -> None:
    path = write(tmp_path, SPEC_EXAMPLE)
    assert parse_job(SPEC_EXAMPLE, path) == load_job(path)


def test_relative_source_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, MINIMAL)
    monkeypatch.chdir(tmp_path)
    assert load_job(Path("job.toml")).source == tmp_path / "job.toml"


def test_workdir_is_relative_to_the_job_files_folder_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "proj" / "data").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    path = write(tmp_path / "proj", MINIMAL + 'workspace = { workdir = "data" }\n')
    job = load_job(path)
    assert job.workspace is not None
    assert job.workspace.workdir == (tmp_path / "proj" / "data").resolve()
    assert job.workspace.exclude == []


def test_absolute_workdir_is_kept(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    job = load_job(write(tmp_path, MINIMAL + f'workspace = {{ workdir = "{tmp_path / "w"}" }}\n'))
    assert job.workspace is not None and job.workspace.workdir == (tmp_path / "w").resolve()


def test_missing_workdir_is_named(tmp_path: Path) -> None:
    exc = job_with(tmp_path, 'workspace = { workdir = "nope" }\n')
    assert exc.field == "job.workspace.workdir"
    assert str(tmp_path / "nope") in str(exc) and "does not exist" in str(exc)
    assert exc.line == 4


def test_workdir_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert "is not a directory" in str(job_with(tmp_path, 'workspace = { workdir = "f" }\n'))


def test_workspace_needs_a_workdir(tmp_path: Path) -> None:
    exc = job_with(tmp_path, "workspace = { exclude = [] }\n")
    assert exc.field == "job.workspace.workdir" and "missing" in exc.problem


def test_error_format_is_file_line_field_problem(tmp_path: Path) -> None:
    exc = job_with(tmp_path, "outputs = 3\n")
    match = ONE_LINE.match(str(exc))
    assert match, str(exc)
    assert match["file"] == str(tmp_path / "job.toml")
    assert (match["line"], match["field"]) == ("4", "job.outputs")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("gpu = 1\n", "job.gpu"),
        ("provider = 'vastai'\n", "job.provider"),
        ("workspace = { workdir = '.', include = [] }\n", "job.workspace.include"),
    ],
)
def test_unknown_fields_are_rejected_by_name(tmp_path: Path, extra: str, field: str) -> None:
    exc = job_with(tmp_path, extra)
    assert exc.field == field and "unknown field" in exc.problem


def test_unknown_field_lists_the_allowed_ones(tmp_path: Path) -> None:
    exc = job_with(tmp_path, "cleanup = true\n")
    assert "allowed: name, run, setup, workspace, outputs, env" in str(exc)


def test_job_must_be_the_only_top_level_key(tmp_path: Path) -> None:
    exc = error_of(tmp_path, "[pool]\nx = 1\n" + MINIMAL)
    assert exc.field == "pool" and exc.line == 1 and "allowed: job" in str(exc)


@pytest.mark.parametrize("text", ["# nothing but a comment\n", "[other]\n"])
def test_job_table_is_required(tmp_path: Path, text: str) -> None:
    exc = error_of(tmp_path, text)
    assert exc.field in ("job", "other")


def test_job_that_is_not_a_table(tmp_path: Path) -> None:
    exc = error_of(tmp_path, 'job = "x"\n')
    assert exc.field == "job" and exc.problem == "expected a table, got a string"


@pytest.mark.parametrize("name", ["a", "airfrans_smoke_01", "A.b-c_9", "9lives", "x" * 64])
def test_safe_names_are_accepted(tmp_path: Path, name: str) -> None:
    assert load_job(write(tmp_path, f'[job]\nname = "{name}"\nrun = "x"\n')).name == name


@pytest.mark.parametrize(
    "name", ["", "a/b", "..", "../x", ".hidden", "-x", "_x", "a b", "x" * 65, "é", "a\\\\b"]
)
def test_unsafe_names_are_rejected(tmp_path: Path, name: str) -> None:
    exc = error_of(tmp_path, f'[job]\nname = "{name}"\nrun = "x"\n')
    assert exc.field == "job.name" and exc.line == 2 and "safe name" in exc.problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[job]\nname = "j"\n', "required field is missing"),
        ('[job]\nname = "j"\nrun = ""\n', "must not be empty"),
        ('[job]\nname = "j"\nrun = "  \\t "\n', "must not be empty"),
        ('[job]\nname = "j"\nrun = "a\\u0000b"\n', "contains a NUL byte"),
        (f'[job]\nname = "j"\nrun = "{"x" * (64 * 1024 + 1)}"\n', "too long"),
    ],
)
def test_run_rules(tmp_path: Path, text: str, problem: str) -> None:
    exc = error_of(tmp_path, text)
    assert exc.field == "job.run" and problem in exc.problem


@pytest.mark.parametrize(
    ("value", "problem"), [('""', "must not be empty"), ("true", "expected a string")]
)
def test_setup_rules(tmp_path: Path, value: str, problem: str) -> None:
    exc = job_with(tmp_path, f"setup = {value}\n")
    assert exc.field == "job.setup" and problem in exc.problem


@pytest.mark.parametrize(
    ("extra", "field", "problem"),
    [
        ("run = 3", "job.run", "expected a string, got an integer"),
        ("setup = 1.5", "job.setup", "expected a string, got a float"),
        ('outputs = "x"', "job.outputs", "expected an array, got a string"),
        ("outputs = [1]", "job.outputs[0]", "expected a string, got an integer"),
        ("env = []", "job.env", "expected a table, got an array"),
        ("env = { A = 1 }", "job.env.A", "expected a string, got an integer"),
        ("env = { A = { B = 'x' } }", "job.env.A", "expected a string, got a table"),
        ("workspace = true", "job.workspace", "expected a table, got a boolean"),
        (
            "workspace = { workdir = 3 }",
            "job.workspace.workdir",
            "expected a string, got an integer",
        ),
        ("workspace = { workdir = '.', exclude = 'x' }", "job.workspace.exclude", "array"),
        ("setup = 1979-05-27", "job.setup", "expected a string, got a date"),
    ],
)
def test_wrong_types_name_field_and_expected_type(
    tmp_path: Path, extra: str, field: str, problem: str
) -> None:
    text = f'[job]\nname = "j"\n{extra}\n' + ("" if extra.startswith("run") else 'run = "x"\n')
    exc = error_of(tmp_path, text)
    assert (exc.field, exc.line) == (field, 3)
    assert problem in exc.problem


@pytest.mark.parametrize(
    "outputs", [["metrics.jsonl"], ["ckpt/*.pt", "**/*.json", "logs/"], ["."], ["a/./b"]]
)
def test_valid_outputs(tmp_path: Path, outputs: list[str]) -> None:
    job = load_job(write(tmp_path, MINIMAL + f"outputs = {json.dumps(outputs)}\n"))
    assert job.outputs == outputs


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('"/etc/passwd"', "absolute"),
        ('"../x"', "'..' segment"),
        ('"a/../../b"', "'..' segment"),
        ('"a/.."', "'..' segment"),
        ('""', "empty entry"),
        ('"a\\u0000b"', "NUL or newline"),
        ('"a\\nb"', "NUL or newline"),
        (f'"{"x" * 4097}"', "too long"),
    ],
)
def test_bad_outputs_are_named(tmp_path: Path, toml: str, problem: str) -> None:
    exc = job_with(tmp_path, f'outputs = ["ok.txt", {toml}]\n')
    assert exc.field == "job.outputs[1]" and problem in exc.problem


@pytest.mark.parametrize("pair", ['"a", "a"', '"a", "./a"', '"d/x", "d//x"'])
def test_duplicate_outputs_are_rejected(tmp_path: Path, pair: str) -> None:
    exc = job_with(tmp_path, f"outputs = [{pair}]\n")
    assert exc.field == "job.outputs" and "listed twice" in exc.problem


def test_output_count_is_capped(tmp_path: Path) -> None:
    many = ", ".join(f'"o{i}"' for i in range(1001))
    exc = job_with(tmp_path, f"outputs = [{many}]\n")
    assert exc.field == "job.outputs" and exc.problem == "too many entries (1001, limit 1000)"


def test_anchored_and_unanchored_excludes_are_valid_and_mean_what_git_means(
    tmp_path: Path,
) -> None:
    excludes = ["/artifacts", "__pycache__", "*.pyc", "data/**/raw", "!keep.pyc", "\\#x"]
    text = MINIMAL + f'workspace = {{ workdir = ".", exclude = {json.dumps(excludes)} }}\n'
    job = load_job(write(tmp_path, text))
    assert job.workspace is not None and job.workspace.exclude == excludes
    spec = pathspec.GitIgnoreSpec.from_lines(job.workspace.exclude)
    assert spec.match_file("artifacts/model.pt")
    assert not spec.match_file("sub/artifacts/model.pt")  # anchored: root only
    assert spec.match_file("__pycache__/m.pyc") and spec.match_file("a/b/__pycache__/m.pyc")
    assert not spec.match_file("keep.pyc")


@pytest.mark.parametrize("pattern", ["x\\\\", "!", "\\\\"])
def test_invalid_exclude_pattern_is_named(tmp_path: Path, pattern: str) -> None:
    text = f'workspace = {{ workdir = ".", exclude = ["ok", "/fine", "{pattern}"] }}\n'
    exc = job_with(tmp_path, text)
    assert exc.field == "job.workspace.exclude[2]"
    assert "not a valid gitignore pattern" in exc.problem
    assert pattern.replace("\\\\", "\\") in exc.problem


def test_exclude_newline_is_rejected(tmp_path: Path) -> None:
    exc = job_with(tmp_path, 'workspace = { workdir = ".", exclude = ["a\\nb"] }\n')
    assert exc.field == "job.workspace.exclude[0]" and "newline" in exc.problem


def test_error_line_points_at_the_bad_list_element(tmp_path: Path) -> None:
    text = '\n[job.workspace]\nworkdir = "."\nexclude = [\n  "a",\n  "b",\n  "x\\\\",\n]\n'
    exc = job_with(tmp_path, text)
    assert (exc.field, exc.line) == ("job.workspace.exclude[2]", 10)


@pytest.mark.parametrize("key", ["A", "_x", "HF_TOKEN", "a1_B2"])
def test_valid_env_names(tmp_path: Path, key: str) -> None:
    assert load_job(write(tmp_path, MINIMAL + f'env = {{ {key} = "v" }}\n')).env == {key: "v"}


@pytest.mark.parametrize("key", ['"1A"', '"A-B"', '""', '"A B"', '"A=B"', '"É"', '"a\\nb"'])
def test_invalid_env_names_are_named_never_their_values(tmp_path: Path, key: str) -> None:
    exc = job_with(tmp_path, f'env = {{ OK = "fine", {key} = "S3CR3T_VALUE" }}\n')
    assert exc.field is not None and exc.field.startswith("job.env")
    assert "environment variable name" in exc.problem
    assert "S3CR3T" not in str(exc)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('"S3CR3T\\u0000tail"', "NUL byte"),
        (f'"S3CR3T{"x" * 64 * 1024}"', "value too big"),
    ],
)
def test_bad_env_values_never_appear_in_errors(tmp_path: Path, value: str, problem: str) -> None:
    exc = job_with(tmp_path, f"env = {{ TOKEN = {value} }}\n")
    assert exc.field == "job.env.TOKEN" and problem in exc.problem
    assert "S3CR3T" not in str(exc)


def test_env_count_is_capped(tmp_path: Path) -> None:
    pairs = ", ".join(f'V{i} = "S3CR3T{i}"' for i in range(257))
    exc = job_with(tmp_path, f"env = {{ {pairs} }}\n")
    assert exc.field == "job.env" and exc.problem == "too many entries (limit 256)"
    assert "S3CR3T" not in str(exc)


def test_env_total_size_is_capped(tmp_path: Path) -> None:
    """Beyond what a file under the size cap can hold, so checked on text."""
    big = "x" * (60 * 1024)
    text = MINIMAL + "[job.env]\n" + "".join(f'V{i} = "{big}"\n' for i in range(20))
    with pytest.raises(JobFileError) as info:
        parse_job(text, tmp_path / "job.toml")
    assert (info.value.field, info.value.problem) == (
        "job.env",
        "values too big in total (over 1024 KiB)",
    )
    assert big not in str(info.value)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[job]\nname = "j"\nrun = \n', 3),
        ('[job]\nname = "j"\nrun = "unterminated\n', 3),
        ('[job]\n\n\nname = "j"\nname = "k"\n', 5),
        ('[job]\nname = "j"\n[job]\nrun = "x"\n', 3),
        ('[job]\nname = "j"\nenv = { A = "S3CR3T", A = "S3CR3T" }\n', 3),
        ('[job]\nname = "j"\nrun = "x"\n[job.env]\nA = "1"\nA = "S3CR3T"\n', 6),
    ],
)
def test_toml_syntax_errors_give_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    exc = error_of(tmp_path, text)
    assert exc.line == line and "TOML syntax" in exc.problem
    assert str(exc).startswith(f"{tmp_path / 'job.toml'}:{line}: ")
    assert "S3CR3T" not in str(exc)


def test_duplicate_key_says_so(tmp_path: Path) -> None:
    assert "duplicate key" in str(error_of(tmp_path, '[job]\nname = "a"\nname = "b"\n'))


def test_parse_job_reports_against_the_given_source(tmp_path: Path) -> None:
    with pytest.raises(JobFileError) as info:
        parse_job('[job]\nname = "j"\n', tmp_path / "virtual.toml")
    assert str(info.value).startswith(f"{tmp_path / 'virtual.toml'}:1: job.run: ")


def test_odd_paths_stay_on_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "we\nird"
    folder.mkdir()
    with pytest.raises(JobFileError) as info:
        load_job(write(folder, "[job]\n"))
    assert "\n" not in str(info.value) and "we\\nird" in str(info.value)


def test_crlf_files_load_and_report_the_right_line(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_bytes(MINIMAL.replace("\n", "\r\n").encode())
    assert load_job(path).name == "j"
    path.write_bytes((MINIMAL + 'outputs = ["/abs"]\n').replace("\n", "\r\n").encode())
    with pytest.raises(JobFileError) as info:
        load_job(path)
    assert info.value.line == 4 and "\r" not in str(info.value)


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert load_job(path).name == "j"


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("garbage", 1, "Expected '=' after a key"),
        ('[job]\nname "j"\nrun = "x"\n', 2, "Expected '=' after a key"),
        ('[job\nname = "j"\n', 1, "Expected ']' at the end of a table declaration"),
        ('[job]\nname = "j"\nrun = "x"\noutputs = ["a",\n', 4, "Invalid value"),
    ],
)
def test_a_toml_typo_says_what_was_expected(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    """Not the character the parser tripped on ('\\x00' for the end of the file)."""
    exc = error_of(tmp_path, text)
    assert exc.line == line and exc.problem.startswith(f"TOML syntax: {says}")
    assert "Unexpected character" not in exc.problem and "\\x00" not in exc.problem


@pytest.mark.parametrize(
    "field",
    [
        'outputs = ["/abs-hf_S3CR3T_value"]',
        'workspace = { workdir = "gone-hf_S3CR3T_value" }',
        'name = "a b hf_S3CR3T_value"',
    ],
)
def test_a_problem_quoting_an_env_value_masks_it(tmp_path: Path, field: str) -> None:
    """The one-line error quotes what it found; an env value in it is masked, as the run
    masks it everywhere (the env table may come before or after the field)."""
    env = 'env = { HF_TOKEN = "hf_S3CR3T_value" }\n'
    for text in (f'[job]\nrun = "x"\n{env}{field}\n', f'[job]\nrun = "x"\n{field}\n{env}'):
        if "name" not in field:
            text = text.replace("[job]\n", '[job]\nname = "j"\n')
        message = str(error_of(tmp_path, text))
        assert "hf_S3CR3T_value" not in message and "***" in message, message
