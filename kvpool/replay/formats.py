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
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import NamedTuple, TextIO

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
_DATETIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(\.\d+)?"
                       r"(Z|[+-]\d\d:?\d\d)?$")


class Row(NamedTuple):
    lineno: int  # 1-based line of the record in the file
    arrival_s: float  # seconds (trace-relative or absolute; replay uses differences)
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] | None  # None: no prefix information in the format


def detect(first_line: str) -> str:
    """The format of a file whose first non-blank line is ``first_line`` (a JSONL record or
    a CSV header); ValueError naming the known formats otherwise."""
    line = first_line.strip()
    if line.startswith("{"):
        try:
            keys = set(json.loads(line))
        except (ValueError, TypeError):
            keys = set()
        if set(_JSON_KEYS) <= keys:
            return "bailian" if set(_BAILIAN_ONLY) & keys else "mooncake"
    else:
        cols = {c.strip() for c in next(csv.reader([line]), [])}
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


def _count(v, name: str) -> int:
    """A token count: a non-negative integer (``12`` or ``12.0``)."""
    f = float(v)
    if f != int(f) or f < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    return int(f)


def _jsonl(f: TextIO, fmt: str) -> Iterator[Row]:
    scale = 1000.0 if fmt == "mooncake" else 1.0  # Mooncake: ms; Bailian: s
    for lineno, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            ids = tuple(int(h) for h in d["hash_ids"])
            row = Row(lineno, float(d["timestamp"]) / scale,
                      _count(d["input_length"], "input_length"),
                      _count(d["output_length"], "output_length"), ids)
        except (ValueError, KeyError, TypeError) as e:
            raise _bad(f, lineno, fmt, e) from None
        if any(h < 0 for h in ids):
            raise _bad(f, lineno, fmt, "hash_ids must be >= 0")
        yield row


def _csv(f: TextIO, fmt: str) -> Iterator[Row]:
    t, inp, out = _AZURE_COLS if fmt == "azure" else _BURST_COLS
    reader = csv.DictReader(f, skipinitialspace=True)
    missing = [c for c in (t, inp, out) if c not in (reader.fieldnames or ())]
    if missing:
        raise _bad(f, 1, fmt, f"header lacks {', '.join(missing)}")
    for d in reader:
        try:
            if None in d.values() or None in d:  # too few or too many fields
                raise ValueError(f"{len(reader.fieldnames)} fields expected")
            arrival = parse_datetime(d[t]) if fmt == "azure" else float(d[t])
            row = Row(reader.line_num, arrival, _count(d[inp], inp), _count(d[out], out), None)
        except (ValueError, TypeError) as e:
            raise _bad(f, reader.line_num, fmt, e) from None
        yield row


def _bad(f: TextIO, lineno: int, fmt: str, why) -> ValueError:
    return ValueError(f"{getattr(f, 'name', '?')}:{lineno}: not a {fmt} trace record: {why}")


def read_rows(f: TextIO, fmt: str) -> Iterator[Row]:
    """The records of an open trace file in format ``fmt`` (one of FORMATS)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; expected one of {EXPECTED}")
    return _jsonl(f, fmt) if fmt in ("mooncake", "bailian") else _csv(f, fmt)
