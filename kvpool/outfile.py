"""Report files named on a command line (``--json out/x.json``, ``--plot out/x.png``).

One place for the rule every command follows: the file's folder is created if missing, so a
fresh checkout can write ``out/...`` without a ``mkdir`` first.

NOTE(check-before-run): a command that computes for long checks its output paths first
(``check_writable``): ``kvpool replay --json DIR`` ran the whole replay, then lost the report to
an IsADirectoryError traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvpool.errors import ConfigError

__all__ = ["check_writable", "out_path", "write_text"]


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


def check_writable(path: str | Path, flag: str) -> Path:
    """``path`` as ``out_path`` gives it, once it is known that a file can be written there:
    ConfigError naming ``flag`` and the reason otherwise (NOTE(check-before-run)). A file the
    check had to create is removed again, so a failed run leaves nothing behind."""
    p = Path(path)
    try:
        out_path(p)
        if p.is_dir():
            raise IsADirectoryError(21, "is a directory")
        if p.exists():
            if not os.access(p, os.W_OK):
                raise PermissionError(13, "permission denied")
        else:
            with open(p, "x"):  # the real test (root passes os.access everywhere)
                pass
            p.unlink()
    except FileExistsError as e:  # mkdir met a file where a folder of the path should be
        raise ConfigError(f"{flag} {path}: cannot write there ({e.filename} is a file, "
                          "not a folder)") from None
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    return p
