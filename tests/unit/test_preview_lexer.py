"""The outputs preview's highlighting: chosen by the file's name, importing only the
Pygments lexers that match it (Rich's guess imported all ~250 lexer modules into the
console's process at the first preview: 0.44 s of CPU and ~46 k objects that every later
full garbage collection walked)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tui.widgets.preview import lexer_for

SOME_C = "#include <stdio.h>\nint main(void) { return 0; }\n"


@pytest.mark.parametrize(
    ("name", "text", "lexer"),
    [
        ("train.py", "import torch\n", "python"),
        ("metrics.txt", "loss 0.25\n", "text"),
        ("run.sh", "echo hi\n", "bash"),
        ("config.yaml", "a: 1\n", "yaml"),
        ("main.c", SOME_C, "c"),
        ("out.log", "step 1\n", "text"),  # no lexer claims *.log
        ("weights.unknown", "x\n", "text"),
        ("Makefile", "all:\n\ttrue\n", "make"),
        ("no-extension", "x\n", "text"),
    ],
)
def test_the_lexer_follows_the_file_name(name: str, text: str, lexer: str) -> None:
    assert lexer_for(name, text) == lexer


def test_a_preview_imports_only_the_lexers_that_match() -> None:
    probe = (
        "import sys\n"
        "from tui.widgets.preview import lexer_for\n"
        "for name in ('a.txt', 'b.py', 'c.unknown', 'd.log'):\n"
        "    lexer_for(name, 'lorem ipsum dolor sit amet\\n' * 50)\n"
        "print(sum(m.startswith('pygments.lexers.') for m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 10  # Rich's Syntax.guess_lexer: all ~250
