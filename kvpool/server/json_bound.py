"""Bounds read off a request body's raw bytes before ``json.loads`` holds the GIL
(NOTE(gil) in json_body.py says why): how many JSON values it can hold, how deep at least
its arrays and objects nest (NOTE(depth-floor)), and its longest string (NOTE(string-bound) in
protocol.py).

Quotes, commas, brackets, braces and backslashes are ASCII, and UTF-8 never reuses those bytes
inside a multi-byte character, so strings are found bytewise: a span from one ``bytes.find``
of a quote to the next, an escaped quote told apart by the run of backslashes before it.
"""

from __future__ import annotations

__all__ = ["depth_floor", "key_before", "longest_string_over", "structural_commas"]

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
    Python-level work that yields the GIL (the caller bounds their count first, with
    ``structural_commas``)."""
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


def _values_in(raw: bytes, start: int, end: int) -> int:
    """Commas, ``[`` and ``{`` in ``raw[start:end]``: each adds a value (NOTE(gil) in
    json_body.py); three C scans."""
    return raw.count(b",", start, end) + raw.count(b"[", start, end) + raw.count(b"{", start, end)


def structural_commas(raw: bytes, limit: int) -> int:
    """Commas, ``[`` and ``{`` outside JSON strings (NOTE(gil) in json_body.py: a JSON body
    holds at most one value more), exact when the count over the whole body exceeds
    ``limit``; otherwise that count (an upper bound, already under ``limit``). The name
    predates counting ``[`` and ``{``; callers' ``max_body_commas`` bounds this count."""
    total = _values_in(raw, 0, len(raw))
    if total <= limit:
        return total
    inside = 0
    i = 0
    n = len(raw)
    while i < n and total - inside > limit:  # under it: a bound is all the caller needs
        q = raw.find(_QUOTE, i)
        if q < 0:
            break
        end = _string_end(raw, q + 1)
        inside += _values_in(raw, q + 1, end)
        i = end + 1
    return total - inside


def depth_floor(raw: bytes, counted: int, depth: int) -> tuple[int, int, int] | None:
    """NOTE(depth-floor): ``(arrays and objects, commas, the least nesting they allow)`` of a
    body whose arrays and objects outside strings must nest deeper than ``depth``, else None;
    ``counted``: ``structural_commas``' exact count (commas plus openings outside strings).

    Each comma outside strings adds one leaf to the tree of a JSON value (a value with none is
    one path), so its ``commas + 1`` root-to-leaf paths hold all of its ``opened`` arrays and
    objects between them: one path, a chain of nested ones, holds at least
    ``ceil(opened / (commas + 1))``. ``[[[...]]]`` 200,000 deep has no comma: at least 200,000
    levels. Only counts: one walk over the strings, as ``structural_commas``' own, and only
    when the raw counts allow it; the commas are ``counted`` less the openings. It holds for
    JSON; garbage such as ``[][]...`` may get it too (the parse would refuse it anyway)."""
    opened = raw.count(b"[") + raw.count(b"{")
    if opened <= depth * (counted - opened + 1):  # even with every opening outside strings
        return None
    i, n = 0, len(raw)
    while i < n:  # what strings hold is no structure: one bytes.find per quote
        q = raw.find(_QUOTE, i)
        if q < 0:
            break
        end = _string_end(raw, q + 1)
        opened -= raw.count(b"[", q + 1, end) + raw.count(b"{", q + 1, end)
        i = end + 1
    commas = counted - opened
    least = -(-opened // (commas + 1))
    return (opened, commas, least) if least > depth else None
