"""What a JSON schema asks and llguidance refuses, where vLLM's default backend (xgrammar) serves
the schema and leaves that part unenforced: each a rewrite of one schema object, applied by
grammar.py (``GrammarSpec.json_schema``, through ``map_subschemas``) before it compiles.

NOTE(look-around): a ``pattern`` (or a ``patternProperties`` key) with a look-ahead, such as
pydantic's ``Decimal`` string ``^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$``, is refused by llguidance
("look-around ... is not supported"), which made every SDK structured-output helper
(``parse(response_format=)``, strict function tools, ``responses.parse``) a 400 for a model
with a Decimal field. xgrammar (0.2.8) ignores a look-ahead with a warning and serves the
request. So its look-ahead groups, ``(?=...)`` and ``(?!...)`` (balanced, with a quantifier
after one; escapes and character classes read as llguidance's Rust regex syntax reads them),
are dropped and the rest is compiled: what can be enforced is, the look-ahead is not. A
look-behind (``(?<=...)``, ``(?<!...)``) stays llguidance's 400, as xgrammar refuses it too
("Lookbehind is not supported yet") and vLLM answers 400; so does a pattern whose rest still
does not compile (``[z-a](?=b)``): the 400 of the pattern as sent, as is the look-ahead of
the patterns past the MAX_RELAXED distinct ones a schema may have relaxed (each rest is
compiled alone first, so the 400 names the pattern sent). Only inside a JSON schema:
a client's regex (``guided_regex``, ``structured_outputs.regex``) is the whole constraint, so
a look-ahead there stays a 400 (xgrammar refuses it there as well).

NOTE(int64-bounds): llguidance reads a bound as an f64 and builds an integer range over i64;
a lower bound that reaches i64's minimum (``minimum`` or ``exclusiveMinimum`` -2**63, the
bound of every generated int64 model, and anything that rounds to it as an f64: -2**63 + 512
and below) fails "Failed to generate regex for integer range", as does any bound of a
``number`` at or beyond +-2**63 (its float range). xgrammar compiles both. Such a bound is
dropped: no JSON number a model writes passes it meaningfully (the loss: values beyond it by at
most 512, or past int64's range). An integer's upper bound at or past 2**63 - 1 compiles
(llguidance caps it at i64's maximum) and stays enforced; so does every bound inside these
edges. Still a 400, as before: an integer ``minimum`` of 10**18 or more with no ``maximum``
(``maximum`` -10**18 or less with no ``minimum``), which llguidance cannot build either.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Iterator

__all__ = ["MAX_RELAXED", "WIDE_BOUND", "bounded", "drop_wide_bounds", "relax_lookaround",
           "without_lookaround"]

_LOOK = ("(?=", "(?!")  # look-ahead; a look-behind stays a 400
# a quantifier after a group, with its lazy or possessive mark (xgrammar drops it too)
_QUANTIFIER = re.compile(r"(?:[?*+]|\{\d+(?:,\d*)?\}|\{,\d+\})[?+]?")
# distinct patterns whose rest one schema may have compiled alone (~70 us each; 1 MiB holds
# ~17,000 distinct ones, over 1 s on the parse pool): a schema's Decimal fields share one
MAX_RELAXED = 64
_EDGE = 2.0 ** 63  # i64's range as an f64: -_EDGE is its minimum
_LOWER = ("minimum", "exclusiveMinimum")
_UPPER = ("maximum", "exclusiveMaximum")
# in compact schema text, a bound that may be at the edge: 19+ digits, an exponent, infinity
WIDE_BOUND = re.compile(r'imum":-?(?:\d{19}|[\d.]+e|Infinity)')


def _outside(pattern: str) -> Iterator[tuple[int, str]]:
    """(index, character) of each character outside escapes and character classes (Rust's
    syntax: ``[`` inside a class opens a nested one, a ``]`` right after ``[`` or ``[^`` is
    literal)."""
    i, depth = 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        i += 1
        if c == "[":
            depth += 1
            i += pattern.startswith("^", i)
            i += pattern.startswith("]", i)
        elif depth:
            depth -= 1 if c == "]" else 0
        else:
            yield i - 1, c


def _lookaround_spans(pattern: str) -> list[tuple[int, int]] | None:
    """The outermost look-ahead groups (each with its quantifier) as [start, end) spans; None
    when a parenthesis is unbalanced (then llguidance reports the pattern as sent)."""
    stack: list[int] = []
    spans: list[tuple[int, int]] = []
    for i, c in _outside(pattern):
        if c == "(":
            stack.append(i)
        elif c == ")":
            if not stack:
                return None
            start = stack.pop()
            if pattern.startswith(_LOOK, start):
                quantifier = _QUANTIFIER.match(pattern, i + 1)
                spans.append((start, quantifier.end() if quantifier else i + 1))
    if stack:
        return None
    outer: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if not outer or start >= outer[-1][1]:
            outer.append((start, end))
    return outer


def without_lookaround(pattern: str) -> str | None:
    """NOTE(look-around): ``pattern`` with its look-ahead groups removed; None when it has
    none (or its parentheses do not balance)."""
    spans = _lookaround_spans(pattern)
    if not spans:
        return None
    kept, at = [], 0
    for start, end in spans:
        kept.append(pattern[at:start])
        at = end
    return "".join(kept) + pattern[at:]


def bounded(compiles: Callable[[str], bool]) -> Callable[[str], bool]:
    """NOTE(look-around): ``compiles`` for one schema, each pattern checked once and at most
    MAX_RELAXED of them: past that a pattern counts as refused (its look-ahead stays a 400)."""
    seen: dict[str, bool] = {}

    def check(pattern: str) -> bool:
        if pattern not in seen:
            if len(seen) >= MAX_RELAXED:
                return False
            seen[pattern] = compiles(pattern)
        return seen[pattern]
    return check


def _relaxed(pattern: str, compiles: Callable[[str], bool]) -> str:
    """llguidance refuses every look-around, so a pattern with a look-ahead group is never
    compiled as sent: its rest is, when that compiles."""
    bare = without_lookaround(pattern)
    return pattern if bare is None or not compiles(bare) else bare


def relax_lookaround(schema: dict, compiles: Callable[[str], bool]) -> dict:
    """NOTE(look-around): the schema object with the look-ahead of its ``pattern`` and its
    ``patternProperties`` keys dropped where only that keeps them from compiling
    (``compiles``: whether llguidance takes a pattern). Keys that would become one stay."""
    out = schema
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and (bare := _relaxed(pattern, compiles)) != pattern:
        out = {**out, "pattern": bare}
    props = schema.get("patternProperties")
    if isinstance(props, dict):
        keys = {k: _relaxed(k, compiles) for k in props}
        if len(set(keys.values())) == len(keys) and any(k != v for k, v in keys.items()):
            out = {**out, "patternProperties": {keys[k]: v for k, v in props.items()}}
    return out


def _f64(value: Any) -> float:
    """A JSON number as llguidance reads it (an f64, rounded to nearest); NaN for anything
    else (a draft-4 boolean ``exclusiveMinimum`` included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # an int past the f64 range
        return math.copysign(math.inf, value)


def drop_wide_bounds(schema: dict) -> dict:
    """NOTE(int64-bounds): the schema object without the bounds llguidance cannot build at
    int64's edge: a lower bound at or below -2**63 (as an f64), and an upper bound at or above
    2**63 where the value may be a non-integer number (``number``, or no type)."""
    kind = schema.get("type")
    floats = kind is None or kind == "number" or (isinstance(kind, list) and "number" in kind)
    drop = {k for k in _LOWER if _f64(schema.get(k)) <= -_EDGE}
    drop |= {k for k in _UPPER if floats and _f64(schema.get(k)) >= _EDGE}
    return {k: v for k, v in schema.items() if k not in drop} if drop else schema
