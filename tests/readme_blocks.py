"""The README's generated blocks: every table or output it shows is produced by a command.

The same holds for the documents in :data:`DOCUMENTS` (the README and ``docs/matrix.md``, the full
peer matrix). A block is written as::

    <!-- generated: sigma-ref audit 0.5 --G 8 -->
    ...the command's output...
    <!-- end generated -->

``python tests/readme_blocks.py --write`` (``make readme``) re-runs every command and
rewrites the blocks of every document; ``tests/test_readme*.py`` fail when a block is stale. Output of a
command given ``--markdown`` is pasted as is; any other is fenced as text. Durations
("6.9 s", "in 2.76s") are the only part compared loosely (:func:`normalise`).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MATRIX = ROOT / "docs" / "matrix.md"
#: The documents with generated blocks: the README and the full peer matrix.
DOCUMENTS: tuple[Path, ...] = (README, MATRIX)
BLOCK = re.compile(r"(<!-- generated: (?P<cmd>.+?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def run(command: str) -> str:
    """Run a README command (``sigma-ref ...`` resolves to this environment's script); stdout."""
    argv = shlex.split(command)
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):  # leading VAR=value, as in a shell
        name, _, value = argv.pop(0).partition("=")
        env[name] = value
    if argv[0] == "sigma-ref":
        argv[0] = str(Path(sys.executable).parent / "sigma-ref")
    elif argv[0] == "python":
        argv[0] = sys.executable
    # 900 s: the peer matrix (seven trainers) takes about 4 CPU-minutes; a loaded runner needs margin
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    return done.stdout


def render(command: str, output: str) -> str:
    """The block body for a command's output."""
    if "--markdown" in shlex.split(command):
        return output.rstrip("\n") + "\n"
    return "```text\n" + output.rstrip("\n") + "\n```\n"


_DURATION = re.compile(r"\b\d+(\.\d+)?\s?s\b")


def normalise(body: str) -> str:
    """``body`` with durations replaced, so that two runs of a command compare equal."""
    return _DURATION.sub("<duration>", body)


def refresh(text: str, only: str | None = None) -> str:
    """``text`` with every generated block re-run (those whose command contains ``only``, if given)."""

    def one(m: re.Match[str]) -> str:
        if only is not None and only not in m["cmd"]:
            return m.group(0)
        return m.group(1) + render(m["cmd"], run(m["cmd"])) + m.group(4)

    return BLOCK.sub(one, text)


def check(command: str, body: str) -> None:
    """Assert the ``<!-- generated: CMD -->`` block ``body`` equals ``command``'s output today."""
    expected = render(command, run(command))
    assert normalise(body) == normalise(expected), f"block for `{command}` is stale; run `make readme`"


def params(path: Path, keep: Callable[[str], bool] = lambda command: True) -> list[Any]:
    """One ``pytest.param(command, body)`` per generated block of ``path`` whose command ``keep`` accepts.

    The blocks are spread over three test files (the README's quick blocks, its gallery tables, the
    peer matrix) so that pytest-xdist's ``--dist loadfile`` runs the long ones on different workers.
    """
    import pytest

    text = path.read_text(encoding="utf-8")
    return [
        pytest.param(command, body, id=f"{path.name}: {command}")
        for command, body in blocks(text)
        if keep(command)
    ]


def runs_the_gallery(command: str) -> bool:
    """The README blocks that re-run a gallery (``python -m tests.gallery``): minutes each."""
    return "tests.gallery" in command


def blocks(text: str) -> list[tuple[str, str]]:
    """``(command, body)`` of every generated block."""
    return [(m["cmd"], m["body"]) for m in BLOCK.finditer(text)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite README.md and docs/matrix.md in place")
    parser.add_argument("--only", metavar="TEXT", help="re-run only the blocks whose command contains TEXT")
    args = parser.parse_args()
    stale = 0
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        new = refresh(text, args.only)
        if args.write:
            path.write_text(new, encoding="utf-8")
        stale += new != text
    return 0 if args.write or not stale else 1


if __name__ == "__main__":
    sys.exit(main())
