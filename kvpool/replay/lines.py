"""The lines of a trace file, each bounded in length and decoded as UTF-8 on its own.

NOTE(bounded-lines): a line is read with a bound of ``MAX_LINE`` bytes (8 MiB, newline
included; docs/benchmarks.md "Trace formats"), and one past it is an error naming
``file:line``. A record of every listed format is under 1 KB, and the largest a record may
describe (2**24 prompt tokens, NOTE(bounded-values) in formats.py) is under 1 MiB of ids;
without the bound a file with no newline (1 GiB of NULs, a sparse file) was read whole as one
line: 2 GB of memory, then a traceback. Decoding line by line puts an undecodable byte on its
own line (a text file decodes ahead in 8 KiB chunks, so the error named no line), and a
compressed trace is recognised by its magic bytes before anything is read (NOTE(compressed)).

NOTE(line-ends): a line ends at ``\r\n``, ``\n`` or a lone ``\r``, as text mode's universal
newlines split it (classic Mac files, Excel's "CSV (Macintosh)"; Python's csv docs ask for
that). The bytes are split here, not by ``readline`` (``\n`` only): a ``\r`` at the end of a
read waits for the next byte before the line ends, so a ``\r\n`` cut by a read is one end.

NOTE(peek): ``peek`` reads the first record for format detection and keeps it (and the blank
lines before it, at most ``MAX_LINE`` bytes of them) for the iteration, so detection never
seeks: a pipe (``<(gunzip -c t.jsonl.gz)``) is a trace too.
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path
from typing import BinaryIO

MAX_LINE = 8 << 20  # bytes per line (a record), newline included: NOTE(bounded-lines)
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark, skipped at the start of the file
# NOTE(compressed): a compressed trace is recognised by its first bytes (each format's magic
# number) and refused with the command that decompresses it, or streams it into a pipe: read as
# text, a .zip / .xz / .bz2 / .zst was "not UTF-8 text", which points at an encoding problem
_COMPRESSED = (  # (magic, what it is, decompress keeping the file, decompress to stdout)
    (b"\x1f\x8b", "gzip-compressed", "gunzip -k", "gunzip -c"),  # RFC 1952
    (b"PK\x03\x04", "a zip archive", "unzip", "unzip -p"),  # a local file header
    (b"PK\x05\x06", "a zip archive", "unzip", "unzip -p"),  # an empty archive
    (b"\xfd7zXZ\x00", "xz-compressed", "unxz -k", "xz -dc"),
    (b"BZh", "bzip2-compressed", "bunzip2 -k", "bzip2 -dc"),  # then the block size, 1-9
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "unzstd", "zstd -dc"),  # RFC 8878
)
_EOL = re.compile(rb"\r\n|\r|\n")  # NOTE(line-ends)
_CHUNK = 1 << 16  # bytes per read


class TraceLines:
    """Iterator over the decoded lines (``str``, line ending kept) of an open binary file.

    Invariant: ``lineno`` is the 1-based number of the last line returned (0 before any).
    """

    def __init__(self, f: BinaryIO, name: str, max_line: int = MAX_LINE) -> None:
        self.name = name  # the file as the user named it, for error messages
        self.lineno = 0  # last line returned
        self.max_line = max_line  # NOTE(bounded-lines)
        self._f = f  # the binary file, positioned after ``_buf``
        self._buf = b""  # bytes read and not yet returned from ``_pos`` on
        self._pos = 0  # where the next line starts in ``_buf``
        self._scan = 0  # where in ``_buf`` to look for a line end (none before it)
        self._eof = False  # ``_f`` has no more bytes
        self._back: deque[str] = deque()  # lines ``peek`` read, returned first (NOTE(peek))

    @classmethod
    def open(cls, path: str | Path, max_line: int = MAX_LINE) -> TraceLines:
        """``path``'s lines; OSError if it cannot be opened, ValueError for a compressed file
        (NOTE(compressed))."""
        f = open(path, "rb")  # closed by close() (the caller's with-block)
        head = f.peek(8)[:8]
        for magic, what, keep, pipe in _COMPRESSED:  # NOTE(compressed)
            if head.startswith(magic) and (magic != b"BZh" or head[3:4].isdigit()):
                f.close()
                raise ValueError(f"{path}: {what} (starts with {magic.hex(' ')}): decompress "
                                 f"it first ({keep} {path}, or pass <({pipe} {path}))")
        return cls(f, str(path), max_line)

    def __iter__(self) -> TraceLines:
        return self

    def __next__(self) -> str:
        if self._back:
            self.lineno += 1
            return self._back.popleft()
        raw = self._raw()
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

    def _raw(self) -> bytes:
        """The next line's bytes, its end kept (NOTE(line-ends)); more than ``max_line`` of
        them for a line past the bound; b"" at the end of the file."""
        while True:
            m = _EOL.search(self._buf, self._scan)
            # a \r last in the buffer may be the first half of a \r\n: read on
            if m is not None and (m.end() < len(self._buf) or m.group() != b"\r" or self._eof):
                end = m.end()
                break
            self._scan = len(self._buf) if m is None else m.start()
            if self._eof or len(self._buf) - self._pos > self.max_line:
                end = len(self._buf)  # the last line, or one past the bound
                break
            self._buf = self._buf[self._pos:]
            self._scan -= self._pos
            self._pos = 0
            chunk = self._f.read1(_CHUNK)
            self._eof = not chunk
            self._buf += chunk
        raw = self._buf[self._pos:end]
        self._pos = self._scan = end
        return raw

    def peek(self) -> tuple[str, int] | None:
        """The first non-blank line and its number, or None for a blank file; the lines stay
        to be iterated (NOTE(peek)). Call before iterating."""
        read: list[str] = []
        size = 0
        for line in self:
            read.append(line)
            if line.strip():
                break
            size += len(line)
            if size > self.max_line:
                raise ValueError(f"{self.name}:{self.lineno}: over {self.max_line} bytes of "
                                 "blank lines before the first record: not a trace file")
        self._back.extend(read)
        self.lineno -= len(read)
        return (read[-1], self.lineno + len(read)) if read and read[-1].strip() else None

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> TraceLines:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
