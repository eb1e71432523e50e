"""Text of `plan --from FILE` (what the framework configuration gave the plan) and of
`plan --emit FORMAT -o FILE` (where the launch configuration went)."""

from __future__ import annotations

from typing import Any

from shardline.io.framework_config import Imported

__all__ = ["render_imported", "render_emitted"]


def render_imported(imported: Imported, flags_given: list[str]) -> str:
    d = imported.degrees
    degrees = ", ".join(f"{k} {d[k]}" for k in ("tp", "pp", "dp", "fsdp", "ep", "cp"))
    ex = imported.execution
    lines = [
        f"from {imported.origin} ({imported.format}): model {imported.model.name}, {degrees}",
        f"  batch {imported.batch} in {imported.microbatches} microbatches, sequence "
        f"{imported.seq_len}, dtype {imported.dtype or 'default'}, recompute "
        f"{ex.get('recompute', 'default')}, interleave {ex.get('interleave', 1)}",
    ]
    if imported.etp is not None:
        lines.append(f"  expert tensor parallel {imported.etp}")
    if flags_given:
        lines.append(f"  flags given over the file: {', '.join(flags_given)}")
    if imported.unknown:
        lines.append(f"  unknown keys (not read): {', '.join(imported.unknown)}")
    lines += [f"  not modelled: {note}" for note in imported.not_modelled]
    return "\n".join(lines) + "\n\n"


def render_emitted(emitted: dict[str, Any]) -> str:
    return f"wrote {emitted['file']} ({emitted['format']} launch configuration)\n"
