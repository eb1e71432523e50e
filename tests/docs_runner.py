"""Run the `console` blocks of README.md and docs/*.md, so that documentation cannot go stale.

A block looks like:

    ```console
    $ shardline matmul 8192 8192 8192 --hw h100-sxm
    ...the exact output...
    ```

`python tests/docs_runner.py --update` rewrites every shown output with the real one;
tests/test_docs.py checks that each command exits as shown (0 unless the block says
`# exit 2`) and prints exactly what the document shows.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```console\n(.*?)```", re.S)
PYTHON = re.compile(r"```python\n(.*?)```", re.S)


@dataclass
class Example:
    path: Path
    command: str
    shown: str


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples(path: Path) -> list[Example]:
    found: list[Example] = []
    for block in BLOCK.findall(path.read_text(encoding="utf-8")):
        command, lines = None, []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    found.append(Example(path, command, "\n".join(lines)))
                command, lines = line[2:], []
            elif command is not None:
                lines.append(line)
        if command is not None:
            found.append(Example(path, command, "\n".join(lines)))
    return found


def python_blocks(path: Path) -> list[str]:
    return PYTHON.findall(path.read_text(encoding="utf-8"))


def run(command: str) -> tuple[int, str]:
    """Run a `shardline ...` command in-process from the repository root.

    Returns (exit code, stdout and stderr together)."""
    from shardline.cli.main import main

    argv = shlex.split(command)
    assert argv[0] == "shardline", f"doc command must start with shardline: {command}"
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    (ROOT / "out").mkdir(exist_ok=True)  # docs write their files under out/ (git-ignored)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = main(argv[1:])
            except SystemExit as exc:
                code = int(exc.code or 0)
    finally:
        os.chdir(cwd)
    return code, out.getvalue().rstrip("\n")


def update(path: Path) -> None:
    text = path.read_text(encoding="utf-8")

    def fill(match: re.Match[str]) -> str:
        pieces = []
        for line in match.group(1).splitlines():
            if line.startswith("$ "):
                _, output = run(line[2:])
                pieces.append(line)
                if output:
                    pieces.append(output)
        return "```console\n" + "\n".join(pieces) + "\n```"

    path.write_text(BLOCK.sub(fill, text), encoding="utf-8")


if __name__ == "__main__":
    if "--update" in sys.argv:
        targets = [Path(p) for p in sys.argv[1:] if p != "--update"] or doc_files()
        for target in targets:
            update(target.resolve())
            print(f"updated {target}")
