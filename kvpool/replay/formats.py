"""Public LLM serving trace formats read by ``kvpool replay`` (docs/benchmarks.md "Trace
formats"). Each reader yields ``Row``s: line number, arrival in seconds, prompt and output
tokens, and the hash ids (``None`` for formats without prefix information).

==========  =====  ==========================================================  ==============
format      kind   fields                                                      tokens per id
==========  =====  ==========================================================  ==============
mooncake    JSONL  timestamp (ms), input_length, output_length, hash_ids       512
bailian     JSONL  chat_id, parent_chat_id, timestamp (s), input_length,       16
                   output_length, type, turn, hash_ids
azure       CSV    TIMESTAMP (datetime), ContextTokens, GeneratedTokens        no prefix info
burstgpt    CSV    Timestamp (s), Model, Request tokens, Response tokens,      no prefix info
                   Total tokens, Log Type
==========  =====  ==========================================================  ==============

NOTE(burstgpt-fails): BurstGPT's README marks failed requests by 0 ``Response tokens`` and
ships ``*_without_fails_*.csv`` copies without them; the reader drops those rows the same
way (counted as ``dropped``), so a file with failures replays as its without-fails copy.

NOTE(bounded-values): every value is checked before anything is built from it (docs/benchmarks.md
"Trace formats"). Timestamps are finite numbers: a JSON ``NaN`` (or CSV ``nan``) timestamp hung
the timed replay, whose clock never passed it, and ``Infinity`` reported makespan inf. Token
counts are integers (``600`` or ``600.0``, never ``true``) up to ``MAX_TOKENS`` = 2**24, far
past any model's context: 1e12 prompt tokens made the reader expand a block id per 512 tokens
until the OOM killer came. Hash ids are a JSON list of integers in [0, ``ID_LIMIT``): the string
``"12"`` was read as the ids [1, 2] and 1.5 as 1, and ids from 2**40 up are the replayer's own
(trace.py ``_UNIQUE`` / ``_FRESH``), so a trace id there was taken for a fresh block.

NOTE(reader-errors): what the parsers raise besides ValueError is a malformed record too, named
by ``file:line``: csv's ``_csv.Error`` for a field past its 128 KiB limit (also in the line
``detect`` reads) and json's RecursionError for deeply nested values; both were tracebacks.
A line's length and encoding are checked before it gets here (NOTE(bounded-lines), lines.py).

NOTE(format-clues): a forced or mistaken format still reads (a Mooncake record has the keys a
Bailian one needs; only the units differ), so the reader counts what points at another format,
for the replay to say once (cli.py): Bailian records lacking chat_id / parent_chat_id / turn,
and Mooncake timestamps with a fraction of a millisecond (Mooncake's are whole ms; Bailian's
seconds, 0.5 or 2.25, read as ms, made a 2.25 s trace last 0.00225 s).

NOTE(csv-header): the CSV reader reads the header ``detect`` accepted: the first non-blank line,
column names stripped (``TIMESTAMP, ContextTokens ,GeneratedTokens ``); a whitespace-only line
is skipped as in JSONL. csv.DictReader took the first physical line (a blank one: "header
lacks TIMESTAMP" under the very header it lacked) and kept the names' trailing spaces.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

FORMATS = ("mooncake", "bailian", "azure", "burstgpt")
DEFAULT_BLOCK = {"mooncake": 512, "bailian": 16, "azure": 16, "burstgpt": 16}
HAS_PREFIX = {"mooncake": True, "bailian": True, "azure": False, "burstgpt": False}
_JSON_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
_BAILIAN_ONLY = ("chat_id", "parent_chat_id", "turn")
_AZURE_COLS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURST_COLS = ("Timestamp", "Request tokens", "Response tokens")
EXPECTED = ("mooncake (JSONL: timestamp, input_length, output_length, hash_ids), "
            "bailian (JSONL: chat_id, parent_chat_id, timestamp, ..., hash_ids), "
            "azure (CSV: TIMESTAMP, ContextTokens, GeneratedTokens), "
            "burstgpt (CSV: Timestamp, Model, Request tokens, Response tokens, ...)")
MAX_TOKENS = 1 << 24  # the most prompt or output tokens a record may hold: NOTE(bounded-values)
ID_LIMIT = 1 << 40  # hash ids are below it; the replayer's own ids start here (trace.py)
_DATETIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(\.\d+)?"
                       r"(Z|[+-]\d\d:?\d\d)?$")


class Row(NamedTuple):
    lineno: int  # 1-based line of the record in the file
    arrival_s: float  # seconds (trace-relative or absolute; replay uses differences)
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] | None  # None: no prefix information in the format


# a millisecond fraction worth a clue: a converter's seconds * 1000 leaves float noise
# (1000.9999999999999), Bailian's seconds read as ms leave 0.5, 0.25, ...
_FRACTION = 1e-6


@dataclass(slots=True)
class FormatClues:
    """Records that look like another format's, counted while reading (NOTE(format-clues))."""

    unkeyed: int = 0  # bailian records lacking one of chat_id, parent_chat_id, turn
    first_unkeyed: int | None = None  # the line of the first of them
    fractional_ms: int = 0  # mooncake timestamps with a fraction of a millisecond
    first_fractional_ms: int | None = None  # the line of the first of them

    def record(self, fmt: str, lineno: int, d: dict, timestamp: float) -> None:
        """Count what record ``d`` (line ``lineno``, read as ``fmt``) says of its format."""
        if fmt == "bailian" and not all(k in d for k in _BAILIAN_ONLY):
            self.unkeyed += 1
            self.first_unkeyed = self.first_unkeyed or lineno
        elif fmt == "mooncake" and abs(timestamp - round(timestamp)) > _FRACTION:
            self.fractional_ms += 1
            self.first_fractional_ms = self.first_fractional_ms or lineno


def detect(first_line: str) -> str:
    """The format of a file whose first non-blank line is ``first_line`` (a JSONL record or
    a CSV header); ValueError naming the known formats otherwise."""
    line = first_line.strip()
    if line.startswith("{"):
        try:
            keys = set(json.loads(line))
        except (ValueError, TypeError, RecursionError):  # NOTE(reader-errors)
            keys = set()
        if set(_JSON_KEYS) <= keys:
            return "bailian" if set(_BAILIAN_ONLY) & keys else "mooncake"
    else:
        try:
            # the reader's dialect (NOTE(csv-header)): a quoted name after ", " unquoted
            cols = {c.strip() for c in next(csv.reader([line], skipinitialspace=True), [])}
        except csv.Error:  # a field past csv's limit: no header of ours
            cols = set()
        if set(_AZURE_COLS) <= cols:
            return "azure"
        if set(_BURST_COLS) <= cols:
            return "burstgpt"
    raise ValueError(f"unknown trace format (first record {line[:120]!r}); expected one of "
                     f"{EXPECTED}")


def parse_datetime(s: str) -> float:
    """Seconds since the epoch of an Azure ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``,
    any number of fraction digits, optional ``+00:00``; naive means UTC)."""
    m = _DATETIME.match(s.strip())
    if m is None:
        raise ValueError(f"TIMESTAMP {s!r} is not a datetime (YYYY-MM-DD HH:MM:SS[.f])")
    y, mo, d, h, mi, sec, frac, tz = m.groups()
    off = timedelta(0)
    if tz and tz != "Z":
        tz = tz.replace(":", "")
        off = timedelta(hours=int(tz[1:3]), minutes=int(tz[3:5])) * (-1 if tz[0] == "-" else 1)
    base = datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec),
                    tzinfo=timezone(off)).timestamp()
    return base + (float(frac) if frac else 0.0)


def _number(v, name: str) -> float:
    """A finite number: a JSON number or numeric text (CSV fields are text), never a bool."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ValueError(f"{name} must be a number, got {v!r:.60}")
    try:
        f = float(v)
    except OverflowError:  # an int past the floats: not finite either
        f = math.inf
    except ValueError:  # text: float's own message named neither the field nor the column
        raise ValueError(f"{name} must be a number, got {v!r:.60}") from None
    if not math.isfinite(f):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    return f


def _count(v, name: str) -> int:
    """A token count: a non-negative integer (``12`` or ``12.0``) up to MAX_TOKENS."""
    f = _number(v, name)
    if f != int(f) or f < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    if f > MAX_TOKENS:  # NOTE(bounded-values)
        raise ValueError(f"{name} {v!r} is more than the replayer's bound of {MAX_TOKENS} "
                         f"tokens (2**24)")
    return int(f)


def _hash_ids(v) -> tuple[int, ...]:
    """A record's ``hash_ids``: a list of integers (``7.0`` is 7) in [0, ID_LIMIT)."""
    if not isinstance(v, list):
        raise ValueError(f"hash_ids must be a list of integers, got {v!r:.60}")
    ids = tuple(int(h) if type(h) is float and h.is_integer() else h for h in v)
    bad = next((h for h in ids if type(h) is not int), None)  # a bool is no id either
    if bad is not None:
        raise ValueError(f"hash_ids must be integers, got {bad!r:.60}")
    if ids and (min(ids) < 0 or max(ids) >= ID_LIMIT):
        raise ValueError(f"hash_ids must be >= 0 and < 2**40 (the replayer's own ids start "
                         f"there), got {min(ids) if min(ids) < 0 else max(ids)}")
    return ids


def _jsonl(f: Iterable[str], fmt: str, clues: FormatClues) -> Iterator[Row]:
    scale = 1000.0 if fmt == "mooncake" else 1.0  # Mooncake: ms; Bailian: s
    for lineno, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            ts = _number(d["timestamp"], "timestamp")
            row = Row(lineno, ts / scale, _count(d["input_length"], "input_length"),
                      _count(d["output_length"], "output_length"), _hash_ids(d["hash_ids"]))
        except (ValueError, KeyError, TypeError, RecursionError) as e:  # NOTE(reader-errors)
            raise _bad(f, lineno, fmt, e) from None
        clues.record(fmt, lineno, d, ts)
        yield row


def _csv(f: Iterable[str], fmt: str) -> Iterator[Row]:
    """NOTE(csv-header): one csv.reader over the non-blank lines, ``at[0]`` the file's line
    number of the last line it took (a quoted field may span lines)."""
    at = [0]

    def nonblank() -> Iterator[str]:
        for at[0], line in enumerate(f, 1):
            if line.strip():
                yield line

    reader = csv.reader(nonblank(), skipinitialspace=True)
    try:
        header = [c.strip() for c in next(reader, [])]
    except csv.Error as e:  # NOTE(reader-errors)
        raise _bad(f, at[0], fmt, e) from None
    cols = _AZURE_COLS if fmt == "azure" else _BURST_COLS
    missing = [c for c in cols if c not in header]
    if missing:
        raise _bad(f, at[0] or 1, fmt, f"header lacks {', '.join(missing)}")
    t, inp, out = (header.index(c) for c in cols)
    while True:
        try:  # a line's own errors (lines.py) pass: they name their line already
            v = next(reader, None)
        except csv.Error as e:  # a field past csv's limit comes from reading
            raise _bad(f, at[0], fmt, e) from None
        if v is None:
            return
        try:
            if len(v) != len(header):
                raise ValueError(f"{len(header)} fields expected, got {len(v)}")
            arrival = parse_datetime(v[t]) if fmt == "azure" else _number(v[t], cols[0])
            row = Row(at[0], arrival, _count(v[inp], cols[1]), _count(v[out], cols[2]), None)
        except (ValueError, TypeError) as e:
            raise _bad(f, at[0], fmt, e) from None
        yield row


def _bad(f, lineno: int, fmt: str, why) -> ValueError:
    article = "an" if fmt[0] in "aeiou" else "a"  # "an azure"
    return ValueError(f"{getattr(f, 'name', '?')}:{lineno}: not {article} {fmt} trace record: "
                      f"{why}")


def read_rows(f: Iterable[str], fmt: str, clues: FormatClues | None = None) -> Iterator[Row]:
    """The records of an open trace file (its lines) in format ``fmt`` (one of FORMATS);
    ``clues`` counts records that look like another format's (NOTE(format-clues))."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; expected one of {EXPECTED}")
    if fmt in ("mooncake", "bailian"):
        return _jsonl(f, fmt, FormatClues() if clues is None else clues)
    return _csv(f, fmt)
