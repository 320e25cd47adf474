"""Report files named on a command line (``--json out/x.json``, ``--plot out/x.png``).

One place for the rule every command follows: the file's folder is created if missing (when
the file is written, not when it is checked), so a fresh checkout can write ``out/...``
without a ``mkdir`` first.

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


def check_writable(path: str | Path, flag: str, inputs: tuple[str | Path, ...] = ()) -> Path:
    """``path``, once it is known that a file can be written there: ConfigError naming
    ``flag`` and the reason otherwise (NOTE(check-before-run)). Nothing is left behind: a
    missing folder is not created here (``write_text`` makes it when the run has a report),
    its nearest existing ancestor must be a folder one can write in. A symlink is checked
    where it points (a dangling one is a file yet to be written). ``inputs`` are the files
    the command reads: an output that is one of them is refused, as ``cp`` refuses."""
    p = Path(path)
    real = Path(os.path.realpath(p))  # a dangling link: its target, written through it
    try:
        if real.is_dir():
            raise IsADirectoryError(21, "is a directory")
        if real.exists():
            _not_an_input(real, inputs)
            if not os.access(real, os.W_OK):
                raise PermissionError(13, "permission denied")
            return p
        _creatable(real)
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    return p


def _not_an_input(real: Path, inputs: tuple[str | Path, ...]) -> None:
    """OSError if ``real`` (an existing file) is one of ``inputs`` (same device and inode)."""
    for i in inputs:
        if os.path.exists(i) and os.path.samefile(real, i):
            raise OSError(f"it is the input {i}: the report would overwrite it; name "
                          "another file")


def _creatable(real: Path) -> None:
    """OSError unless a file can be created at ``real`` (which does not exist)."""
    folder = real.parent
    while not folder.exists():  # the folders write_text will make
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(20, f"{folder} is a file, not a folder")
    if folder == real.parent:
        with open(real, "x"):  # the real test (root passes os.access everywhere)
            pass
        real.unlink()
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(13, f"permission denied in {folder}")
