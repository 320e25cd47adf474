"""The lines of a trace file, each bounded in length and decoded as UTF-8 on its own.

NOTE(bounded-lines): a line is read with a bound of ``MAX_LINE`` bytes (8 MiB, newline
included; docs/benchmarks.md "Trace formats"), and one past it is an error naming
``file:line``. A record of every listed format is under 1 KB, and the largest a record may
describe (2**24 prompt tokens, NOTE(bounded-values) in formats.py) is under 1 MiB of ids;
without the bound a file with no newline (1 GiB of NULs, a sparse file) was read whole as one
line: 2 GB of memory, then a traceback. Decoding line by line puts an undecodable byte on its
own line (a text file decodes ahead in 8 KiB chunks, so the error named no line), and a gzip'd
trace is recognised by its magic bytes before anything is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

MAX_LINE = 8 << 20  # bytes per line (a record), newline included: NOTE(bounded-lines)
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark, skipped at the start of the file
_GZIP = b"\x1f\x8b"  # the first bytes of a gzip file (RFC 1952)


class TraceLines:
    """Iterator over the decoded lines (``str``, line ending kept) of an open binary file.

    Invariant: ``lineno`` is the 1-based number of the last line returned (0 before any).
    """

    def __init__(self, f: BinaryIO, name: str, max_line: int = MAX_LINE) -> None:
        self.name = name  # the file as the user named it, for error messages
        self.lineno = 0  # last line returned
        self.max_line = max_line  # NOTE(bounded-lines)
        self._f = f  # the binary file, positioned at the next line

    @classmethod
    def open(cls, path: str | Path, max_line: int = MAX_LINE) -> TraceLines:
        """``path``'s lines; OSError if it cannot be opened, ValueError for a gzip'd file."""
        f = open(path, "rb")  # closed by close() (the caller's with-block)
        if f.peek(2)[:2] == _GZIP:
            f.close()
            raise ValueError(f"{path}: gzip-compressed (starts with 1f 8b): decompress it "
                             f"first (gunzip -k {path})")
        return cls(f, str(path), max_line)

    def __iter__(self) -> TraceLines:
        return self

    def __next__(self) -> str:
        raw = self._f.readline(self.max_line + 1)
        if not raw:
            raise StopIteration
        self.lineno += 1
        if len(raw) > self.max_line:
            raise ValueError(f"{self.name}:{self.lineno}: line is over {self.max_line} bytes "
                             "(the bound on one record): not a trace file")
        if self.lineno == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM):]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{self.name}:{self.lineno}: not UTF-8 text (byte "
                             f"0x{raw[e.start]:02x} at column {e.start + 1})") from None

    def rewind(self) -> None:
        """Back to the first line."""
        self._f.seek(0)
        self.lineno = 0

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> TraceLines:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
