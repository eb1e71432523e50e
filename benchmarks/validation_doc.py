"""One section of docs/validation.md, replaced in place by the benchmark that owns it: from its
`## ` heading to the next section (or the next generated block's `<!--` marker), every other
section kept; a missing section is added at the end, a missing file started with the title."""

from __future__ import annotations

from pathlib import Path

TITLE = (
    "# Validation\n\nHow close shardline's realistic prediction comes to published measurements.\n"
)


def replace_section(text: str, heading: str, path: Path) -> None:
    """Write `text` (which starts with `heading`) as that section of `path`."""
    old = path.read_text(encoding="utf-8") if path.exists() else TITLE
    start = old.find(heading)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        ends = [
            i
            for i in (old.find("\n## ", start + len(heading)), old.find("\n<!--", start))
            if i >= 0
        ]
        end = min(ends) if ends else -1  # the next section, or the next generated block's marker
        new = old[:start] + text.rstrip("\n") + "\n" + ("" if end < 0 else old[end:])
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")
