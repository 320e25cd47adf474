"""Bounds on a JSON body's value count and string lengths, from its raw bytes, before
``json.loads`` (the string bound: protocol.py NOTE(string-bound)).

NOTE(gil): parsing on a worker thread does not keep the event loop free while ``json.loads``
runs: the C scanner holds the GIL for the whole call, and its cost grows with the number of
values, not bytes (a 4 MB string parses in ~8 ms; 2M token ids take ~0.2 s, all of it a stall
of every stream and /health). So bodies with more values than any request that fits can hold
are refused before the parse. The count must not itself hold the GIL long:

- ``raw.count(b",")`` (one fast C call) bounds the values from above: a body under the limit
  is parsed as before, with no further work;
- only past it are the commas inside strings subtracted: string spans found with
  ``bytes.find`` (quotes, commas and backslashes are ASCII, and UTF-8 never reuses those bytes
  inside a multi-byte character), escaped quotes told apart by the run of backslashes before
  them. This is Python-level work: it yields the GIL at every switch interval.

::

    {"prompt": [0,0,0], "stop": ["a,b"]}
                 ^ ^  ^              ^ inside a string: not a value separator
    structural commas = 4 - 1 = 3   >= values - 1 of every array and object
"""

from __future__ import annotations

__all__ = ["MAX_JSON_BYTES_PER_CHAR", "key_before", "longest_string_over", "structural_commas"]

# NOTE(bytes-per-char): the most JSON bytes one character of a decoded string can take: a
# code point outside the BMP written as an escaped surrogate pair (``\ud83d\ude00``) is
# 12 bytes; raw UTF-8 is at most 4, a BMP escape 6
MAX_JSON_BYTES_PER_CHAR = 12

_QUOTE = b'"'
_BACKSLASH = 0x5C


def _string_end(raw: bytes, start: int) -> int:
    """Index of the quote closing the string whose content starts at ``start`` (len(raw) if
    it never closes)."""
    j = start
    while True:
        end = raw.find(_QUOTE, j)
        if end < 0:
            return len(raw)
        k = end
        while k > start and raw[k - 1] == _BACKSLASH:
            k -= 1
        if (end - k) % 2 == 0:  # an even run of backslashes escapes itself, not the quote
            return end
        j = end + 1


def longest_string_over(raw: bytes, limit: int) -> tuple[int, int] | None:
    """``(opening quote index, byte length between the quotes)`` of the first JSON string in
    ``raw`` longer than ``limit`` bytes, or None when there is none. One ``bytes.find`` per
    quote: a 4 MB string is found in a few C calls, and a body of many short strings is
    Python-level work that yields the GIL (the caller bounds their count first, with ``structural_commas``)."""
    if len(raw) <= limit:
        return None
    i, n = 0, len(raw)
    while i < n:
        q = raw.find(_QUOTE, i)
        if q < 0:
            return None
        end = _string_end(raw, q + 1)
        if end - q - 1 > limit:
            return q, end - q - 1
        i = end + 1
    return None


def key_before(raw: bytes, quote: int) -> str | None:
    """The object key whose value is the string opening at ``quote`` (``"key": "..."``), or
    None (an array element, or no plain key): only to name the field in an error."""
    head = raw[max(0, quote - 256):quote].rstrip()
    if not head.endswith(b":"):
        return None
    head = head[:-1].rstrip()
    if not head.endswith(_QUOTE):
        return None
    start = head.rfind(_QUOTE, 0, len(head) - 1)
    if start < 0:
        return None
    try:
        return head[start + 1:-1].decode("ascii")
    except UnicodeDecodeError:
        return None


def structural_commas(raw: bytes, limit: int) -> int:
    """Commas outside JSON strings, exact when the total count of commas exceeds ``limit``;
    otherwise that total (an upper bound, already under ``limit``)."""
    total = raw.count(b",")
    if total <= limit:
        return total
    inside = 0
    i = 0
    n = len(raw)
    while i < n:
        q = raw.find(_QUOTE, i)
        if q < 0:
            break
        end = _string_end(raw, q + 1)
        inside += raw.count(b",", q + 1, end)
        i = end + 1
    return total - inside
