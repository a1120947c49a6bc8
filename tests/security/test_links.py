"""A chain of links in the outputs (`ln -s . d; ln -s d/d/d/../../.. e`) passes
a lexical check yet resolves above the landing dir on the operator's machine. Through a
real run: the node's walk refuses it (listed in manifest.json), and every link that did
land resolves inside the landing dir."""

from __future__ import annotations

import json
import os

from tests.support.cli import swjob_run
from tests.support.hostile import CHAIN


def test_chained_links_in_outputs_never_point_outside_the_landing_dir(
    tmp_path, make_job, record_fault
) -> None:
    job = make_job(
        run=(
            "mkdir -p res/sub && echo x > res/sub/f && cd res && "
            f"ln -s . d && ln -s {CHAIN} e && ln -s sub/f ok"
        ),
        outputs=["res"],
    )
    code, printed = swjob_run(tmp_path, job.source)
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    landing = (run_dir / "outputs").resolve()
    res = landing / "res"
    assert code == 0, printed
    assert os.readlink(res / "d") == "." and (res / "ok").read_text() == "x\n"
    assert not os.path.lexists(res / "e")
    refused = json.loads((run_dir / "manifest.json").read_text())["refused"]
    assert any("res/e" in line and "resolves outside" in line for line in refused), refused
    links = [p for p in landing.rglob("*") if p.is_symlink()]
    outside = [str(p) for p in links if not os.path.realpath(p).startswith(str(landing))]
    assert len(links) == 2 and outside == []
    record_fault(
        "job's outputs hold `ln -s . d; ln -s d/d/d/../../.. e` (lexically inside)",
        None,
        "e refused by the node's walk (listed in manifest.json); d and ok landed inside",
    )
