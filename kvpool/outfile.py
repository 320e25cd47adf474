"""Report files named on a command line (``--json out/x.json``, ``--plot out/x.png``).

One place for the rule every command follows: the file's folder is created if missing, so a
fresh checkout can write ``out/...`` without a ``mkdir`` first.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["out_path", "write_text"]


def out_path(path: str | Path) -> Path:
    """``path`` as a Path whose parent folder exists (created with its parents if needed)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path``, creating its folder first."""
    p = out_path(path)
    p.write_text(text)
    return p
