"""The console's pure parts: the capped log ring, formatting, previews, history reading."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from rich.text import Text

from agent.protocol import LogLine, Stream
from engine.report.money import cost_split, money
from tui import format as fmt
from tui import history
from tui.feed import RunLog, lines_of
from tui.widgets.log_view import LogHighlighter, tag
from tui.widgets.preview import incomplete_pull, load_manifest, preview


def rendered(renderable: object) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_ring_keeps_the_newest_lines_and_counts_what_a_reader_missed() -> None:
    ring = RunLog(cap=3)
    ring.extend(lines_of("run", [LogLine(stream=Stream.STDOUT, text=str(i)) for i in range(5)]))
    assert [line[2] for line in ring.since(0)] == ["2", "3", "4"]  # at most cap
    assert [line[2] for line in ring.since(3)] == ["3", "4"]
    assert ring.since(5) == [] and ring.total == 5


def test_formatting() -> None:
    assert [fmt.duration(s) for s in (0, 9, 245, 7380)] == ["0s", "9s", "4m05s", "2h03m"]
    assert fmt.duration(timedelta(seconds=61)) == "1m01s" and fmt.duration(None) == "—"
    assert [fmt.size(n) for n in (3, 2048, 5 << 20)] == ["3 B", "2.0 KiB", "5.0 MiB"]
    assert fmt.one_line("a\n  b\tc") == "a b c"
    assert money(None) == "—" and money(1.5) == "$1.50" and money(0.0123) == "$0.012"
    assert fmt.duration(0.34, tenths=True) == "0.3s" and fmt.duration(0.34) == "0s"
    assert fmt.duration(75.2, tenths=True) == "1m15s"


def test_node_offer_and_cost_split() -> None:
    from datetime import UTC, datetime

    from engine.report.events import NodeState
    from engine.report.views import NodeView

    offer = {
        "gpu_name": "RTX 3090",
        "num_gpus": 1,
        "gpu_ram_mb": 24576,
        "dph": 0.22,
        "reliability": 0.995,
        "geolocation": "Norway, NO",
        "offer_id": 103,
    }
    node = NodeView(
        provider="vastai",
        node_id="1000123",
        pool="gpu",
        run_id="r-1",
        state=NodeState.BUSY,
        price_per_hour=0.22,
        offer=offer,
        since=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert fmt.offer_summary(node) == (
        "1× RTX 3090 24 GB · $0.22/h · Norway, NO · reliability 0.995 · offer 103"
    )
    local = node.model_copy(update={"node_id": "local-r-1-ab12", "offer": {"pid": 7}})
    assert fmt.short_node_id(local) == "local-ab12" and fmt.short_node_id(node) == "1000123"
    assert fmt.offer_summary(local) == ""
    split = cost_split({"run": 0.5, "provisioning": 0.01}, ["provisioning", "setup", "run"])
    assert split == "provisioning $0.010 · run $0.500"


def test_stderr_lines_are_red_and_search_hits_marked() -> None:
    highlighter = LogHighlighter()
    highlighter.term = "disk"
    err = highlighter(Text(tag("run", True) + "slow disk"))
    out = highlighter(Text(tag("run", False) + "fine"))
    assert any("red" in str(span.style) for span in err.spans)
    assert any("reverse" in str(span.style) for span in err.spans)
    assert not any("red" in str(span.style) for span in out.spans)


def test_preview_of_each_kind(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    out.mkdir()
    (out / "m.json").write_text('{"b": 1, "a": [1, 2]}')
    (out / "log.jsonl").write_text("".join(f'{{"i": {i}}}\n' for i in range(100)))
    (out / "w.bin").write_bytes(bytes(range(256)))
    entries = [{"path": "w.bin", "size": 256, "sha256": "ab" * 32, "verified": True}]
    (tmp_path / "manifest.json").write_text(json.dumps({"files": entries}))
    manifest = load_manifest(tmp_path)
    pretty = rendered(preview(out / "m.json", None))
    assert '"a": [' in pretty and "[1, 2]" not in pretty  # re-indented, one item a line
    jsonl = rendered(preview(out / "log.jsonl", None))
    assert '{"i": 99}' in jsonl and '{"i": 59}' not in jsonl
    binary = rendered(preview(out / "w.bin", manifest["w.bin"]))
    assert "binary file" in binary and "ab" * 32 in binary and "verified" in binary
    assert "NOT verified" in rendered(preview(out / "w.bin", {**entries[0], "verified": False}))
    assert "not in manifest" in rendered(preview(out / "m.json", None))


def test_an_unfinished_pull_is_called_out(tmp_path: Path) -> None:
    assert incomplete_pull(tmp_path) is None  # no manifest yet
    files = [{"path": "a", "verified": True}, {"path": "b", "verified": False}]
    (tmp_path / "manifest.json").write_text(json.dumps({"complete": True, "files": files[:1]}))
    assert incomplete_pull(tmp_path) is None  # everything landed
    (tmp_path / "manifest.json").write_text(json.dumps({"complete": False, "files": files}))
    assert "1 of 2 files landed whole" in (incomplete_pull(tmp_path) or "")


def test_outputs_that_did_not_land_are_named_with_their_reasons(tmp_path: Path) -> None:
    """They are not in the tree, so the browser's warning is where the operator sees them."""
    files = [
        {"path": "a", "verified": True},
        {"path": "b\x1b[2J", "verified": False, "reason": "vanished before it could be read"},
    ]
    body = {"complete": True, "files": files, "refused": ["refused 'f': fifo"]}
    (tmp_path / "manifest.json").write_text(json.dumps(body))
    lines = (incomplete_pull(tmp_path) or "").splitlines()
    assert lines[0] == "⚠ outputs incomplete: 2 of 3 files did not land"
    # the job's escape sequence in the name is drawn harmless, never obeyed
    assert lines[1:] == ["  b — vanished before it could be read", "  refused 'f': fifo"]


def test_history_skips_a_torn_last_line(tmp_path: Path) -> None:
    run_dir = next((Path(__file__).parent / "data" / "runs" / "trainer").iterdir())
    text = (run_dir / "events.jsonl").read_text()
    (tmp_path / "events.jsonl").write_text(text + '{"run_id": "x", "se')
    past = history.load(tmp_path, cap=2)
    view, lines = past.view, past.lines
    assert view is not None and view.state == "FAILED" and len(view.timeline) == 5
    assert [(err, text) for _, err, text, _ in lines] == [
        (False, "epoch 1"),
        (True, "warn: slow disk"),
    ]
    assert history.load(tmp_path / "missing", cap=2) == history.Past(None)


def test_cli_refuses_a_bad_job_file_before_starting_anything(tmp_path: Path, capsys) -> None:
    from tui.app import main

    assert main([str(tmp_path / "nope.toml")]) == 1
    assert "file not found" in capsys.readouterr().err


def test_transfer_figures() -> None:
    from engine.report.events import TransferDirection, TransferProgress
    from tui.widgets.transfers import describe

    tp = TransferProgress(
        run_id="r",
        direction=TransferDirection.PUSH,
        bytes_done=1 << 20,
        bytes_total=4 << 20,
        files_done=1,
        files_total=3,
        current="data/a.bin",
        rate_bps=2 << 20,
        eta_s=1.5,
    )
    assert describe(tp) == "1.0 MiB / 4.0 MiB · 1/3 files · 2.0 MiB/s · ETA 1s · data/a.bin"
    assert describe(tp.model_copy(update={"done": True})).endswith("· done")


def test_log_view_still_overrides_textual_log_sizing() -> None:
    """LogView replaces Log's private `_update_size` (a thread per write); fail loudly if
    Textual renames it or the width callback, rather than silently losing the fix."""
    from textual.widgets import Log

    from tui.widgets.log_view import LogView

    assert callable(getattr(Log, "_update_size", None))
    assert callable(getattr(Log, "_update_maximum_width", None))
    assert callable(getattr(Log, "_process_line", None))
    assert LogView._update_size is not Log._update_size


def test_board_columns_give_way_by_priority_and_keep_the_figures_on_screen() -> None:
    from tui.widgets.jobs_table import CHROME, COLUMNS, PADDING, SHORT_ID, WIDE, fit_columns

    def used(columns: tuple[tuple[str, str, int], ...]) -> int:
        return sum(w + PADDING for _, _, w in columns) + CHROME

    assert fit_columns(130) == COLUMNS  # room for every base column: nothing gives way
    for width in range(80, 160):
        columns = fit_columns(width)
        keys = [key for key, _, _ in columns]
        assert keys[-3:] == ["elapsed", "why", "cost"] and used(columns) <= width, width
    wide = fit_columns(200)  # a wide terminal uses its width: more columns, the whole reason
    assert used(wide) == 200 and {c[0] for c in WIDE} < {k for k, _, _ in wide}
    assert wide[-1][0] == "reason" and wide[-2][0] == "cost" and wide[0][2] > COLUMNS[0][2]
    narrow = fit_columns(120)
    assert SHORT_ID in narrow and "node" in [k for k, _, _ in narrow]  # short ids first
    at_80 = fit_columns(80)
    assert "node" not in [k for k, _, _ in at_80]
    assert dict((k, w) for k, _, w in at_80)["name"] >= 11


def test_a_run_is_queued_only_while_its_pool_is_full() -> None:
    from datetime import UTC, datetime

    from engine.report.views import NodeView, PoolView, RunView
    from tui.queue import busy_by_pool, queued

    t0 = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
    run = RunView(
        run_id="r",
        job_name="j",
        pool="local",
        state="PENDING",
        phase="provisioning",
        created=t0,
        updated=t0,
        run_dir=Path("/nonexistent"),
        live=True,
    )
    full = busy_by_pool([PoolView(name="local", provider="local", max_nodes=0, summary="")])
    free = busy_by_pool([PoolView(name="local", provider="local", max_nodes=1, summary="")])
    wait = queued(run, full)
    assert wait is not None and wait.describe(t0 + timedelta(seconds=12)) == (
        "queued (0 of 0 nodes busy) for 12s"
    )
    assert queued(run, free) is None  # a slot is free: its node is being started
    assert queued(run.model_copy(update={"phase": "materializing"}), full) is None
    assert queued(run.model_copy(update={"live": False}), full) is None  # history: not waiting
    # max_nodes holds across processes: a node another swjob drives fills a one-node pool
    node = NodeView(provider="local", node_id="n", pool="local", run_id="o", state="busy", since=t0)
    theirs = run.model_copy(update={"run_id": "o", "live": False, "state": "RUNNING", "node": node})
    one = [PoolView(name="local", provider="local", max_nodes=1, summary="")]
    wait = queued(run, busy_by_pool(one, [theirs]))
    assert wait is not None and "(1 of 1 nodes busy)" in wait.describe(t0)
    ended = theirs.model_copy(update={"finished": t0})  # its node is gone with its run
    assert queued(run, busy_by_pool(one, [ended])) is None


def test_log_tail_and_disk_search_read_the_run_log_files(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "setup.log").write_text("installing\n")
    (logs / "run.log").write_text("".join(f"line {i}\n" for i in range(1, 20001)))
    lines = history.tail(tmp_path, 3)
    assert lines == [("run", False, f"line {i}", 0.0) for i in (19998, 19999, 20000)]
    whole = history.tail(tmp_path, 10**6)
    assert whole[0] == ("setup", False, "installing", 0.0)
    assert whole[1][2] != "line 1" and len(whole) < 20001  # run.log read from its end only
    files = history.log_files(tmp_path)
    assert history.count_lines(files) == 20001
    assert history.search_logs(files, "LINE 1999") == (11, "logs/run.log:1999")  # 19990…
    assert history.search_logs(files, "install") == (1, "logs/setup.log:1")
    assert history.search_logs(files, "absent") == (0, None)


def test_help_rows_put_swjob_keys_first_and_show_each_key_once() -> None:
    from textual.app import App
    from textual.binding import ActiveBinding, Binding
    from textual.screen import Screen

    app, screen = App(), Screen()
    ours = Binding("question_mark,f1", "help", "Help", key_display="?", id="swjob.app.help")
    help_q, help_f1 = Binding.make_bindings([ours])
    generic = Binding("tab", "focus_next", "Focus Next")
    logs = Binding("l", "logs", "Logs", id="swjob.board.logs")
    bindings = {
        "tab": ActiveBinding(app, generic, True),
        "question_mark": ActiveBinding(app, help_q, True),
        "f1": ActiveBinding(app, help_f1, True),
        "l": ActiveBinding(screen, logs, False),
    }
    shown = {"tab": "tab", "question_mark": "?", "f1": "?", "l": "l"}
    from tui.screens.help import help_rows

    rows = help_rows(bindings, shown)
    assert rows == [("l", "Logs", False), ("? f1", "Help", True), ("tab", "Focus Next", True)]


def test_the_detail_says_when_the_last_live_sync_landed_and_what_it_held() -> None:
    from datetime import UTC, datetime

    from engine.report import events as ev
    from engine.report.runbook import apply, new_view
    from tui.summary import summary

    at = datetime(2026, 12, 3, 6, 0, 5, tzinfo=UTC)
    view = new_view(ev.Submitted(run_id="r1", job_name="train", pool="spot", run_dir="/tmp/r1"))
    synced = ev.OutputsSynced(
        run_id="r1", ts=at, files=4, bytes=3 << 20, paths=["a", "b", "c", "d"], held=6, syncs=2
    )
    assert "last sync" not in rendered(summary(view, at))
    text = rendered(summary(apply(view, synced), at))
    line = next(x for x in text.splitlines() if x.startswith("last sync"))
    assert line.strip() == (
        f"last sync {fmt.clock_time(at)}: 4 file(s), 3.0 MiB (a, b, c, …); 6 output(s) held"
    )
    assert "attempt" not in text
    second = view.model_copy(update={"attempt": 2, "attempts": 3})
    assert "pool spot  attempt 2/3  elapsed" in rendered(summary(second, at))


def test_a_job_s_row_is_its_latest_attempt_at_the_cost_of_all_of_them() -> None:
    from datetime import UTC, datetime

    from engine.report.views import RunView
    from tui.attempts import attempts_text, neighbour
    from tui.chains import ChainRows
    from tui.widgets.jobs_table import cells

    at = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)

    def attempt(run_id: str, n: int, cost: float) -> RunView:
        return RunView(
            run_id=run_id, job_name="j", pool="spot", state="FAILED" if n == 1 else "RUNNING",
            phase="done" if n == 1 else "run", created=at, updated=at, run_dir=Path("/r"),
            attempt=n, attempts=3, first_run=None if n == 1 else "a1", cost_dollars=cost,
        )  # fmt: skip

    rows = ChainRows()
    first, second = attempt("a1", 1, 0.25), attempt("a2", 2, 0.5)
    rows.see([first])
    assert rows.is_latest(first) and rows.replaced() == {}
    rows.see([second])
    assert not rows.is_latest(first) and rows.replaced() == {"a1": "a2"}
    row = cells(second, at, cost=rows.cost(second))
    assert row["step"] == "run 2/3" and row["cost"] == "$0.750"
    assert cells(first, at)["step"] == "done 1/3" and cells(first, at)["cost"] == "$0.250"
    listed = rendered(attempts_text([first, second], "a2"))
    assert "  attempt 1/3  a1  FAILED  $0.250" in listed and "▸ attempt 2/3  a2  RUNNING" in listed
    assert "2 attempts, $0.750 in all" in listed
    assert (
        neighbour([first, second], "a2", -1) == "a1" and neighbour([first, second], "a2", 1) is None
    )
