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

NOTE(int64-bounds): llguidance reads a bound as an f64: an integer's range over i64 from it, a
number's over the f64's shortest decimal, and its JSON reader may read a float of 16+
significant digits an ulp off. So past 2**53 a bound was widened (``maximum``
9007199254740999 let 9007199254741000 through, ``exclusiveMaximum`` 10**18 let 10**18: an
exclusive bound is moved by one in f64), and a range at i64's minimum (``minimum`` and
``maximum`` both -2**63 or below) crashes the process. Each bound it may misread is rewritten
inward to one it reads exactly, so every output satisfies the schema as sent: a bound of 2**53
or more in size (or an integer's float bound) becomes an inclusive bound at the nearest f64
inside it (and, for a number, whose shortest decimal is inside it too), an integer's upper
bound of 2**63 - 1 or more stays 2**63 - 1 (exact: llguidance caps it), and a number's float
bound of 16+ significant digits is rounded inward to 15. Lost: the values between the bound
and that f64 (under 2**53, none; below 2**63 up to 1023, and the 1024 least int64s, as -2**63
itself cannot be built; a number's, up to 1e-14 of the bound, or past +-(2**63 - 1024)). A
bound that leaves only values past that range (an integer ``minimum`` of 2**63, a ``maximum``
under -2**63 + 1024) is a 400, as is a one-sided bound of 10**18 or more in size (``minimum``
10**18 with no ``maximum``), which llguidance cannot build either. Not rewritten: a number's
bound written with an exponent beyond 1e+-22 (llguidance's reader may round it too). xgrammar
compiles all of these.
"""

from __future__ import annotations

import decimal
import math
import re
from typing import Any, Callable, Iterator

from kvpool.errors import RequestError, shown

__all__ = ["MAX_RELAXED", "WIDE_BOUND", "bounded", "drop_wide_bounds", "relax_lookaround",
           "without_lookaround"]

_LOOK = ("(?=", "(?!")  # look-ahead; a look-behind stays a 400
# a quantifier after a group, with its lazy or possessive mark (xgrammar drops it too)
_QUANTIFIER = re.compile(r"(?:[?*+]|\{\d+(?:,\d*)?\}|\{,\d+\})[?+]?")
# distinct patterns whose rest one schema may have compiled alone (~70 us each; 1 MiB holds
# ~17,000 distinct ones, over 1 s on the parse pool): a schema's Decimal fields share one
MAX_RELAXED = 64
_EDGE = 2 ** 63  # i64's range: -_EDGE is its minimum
_EXACT = 2 ** 53  # every integer up to here is an f64
_LOW = -_EDGE + 1024  # the least f64 above i64's minimum: the lowest bound llguidance builds
_HIGH = _EDGE - 1024  # the greatest f64 under 2**63: the highest a number's bound builds
_I64_MAX = _EDGE - 1
_LOWER = ("minimum", "exclusiveMinimum")
_UPPER = ("maximum", "exclusiveMaximum")
# in compact schema text, a bound llguidance may misread: 16+ digits, a float of 16+ digits, an
# exponent, infinity (NOTE(int64-bounds))
WIDE_BOUND = re.compile(r'imum":-?(?:\d{16}|[\d.]{17}|[\d.]+e|Infinity)')


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


def _number(value: Any) -> bool:
    """A JSON number (a draft-4 boolean ``exclusiveMinimum`` is none)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _wide(value: Any, integral: bool) -> bool:
    """NOTE(int64-bounds): a finite bound llguidance may misread: past 2**53 (2**53 itself too:
    an exclusive bound there is moved by one, which the f64 rounds back), or an integer's
    float bound (its JSON reader may read a long one an ulp off)."""
    return _number(value) and math.isfinite(value) and (
        abs(value) >= _EXACT or integral and isinstance(value, float))


def _inward(n: int, up: bool, integral: bool) -> int:
    """The f64 within llguidance's range nearest the integer ``n`` on its side (at or above
    ``n`` when ``up``, else at or below), as an integer: an integer's range reads that f64
    exactly; a number's reads its shortest decimal (``repr``), which must be on the side too."""
    f, past = float(min(max(n, _LOW), _HIGH)), (lambda x: x < n) if up else (lambda x: x > n)
    while past(f) or not integral and past(decimal.Decimal(repr(f))):
        f = math.nextafter(f, math.inf if up else -math.inf)
    return int(f)


def _past(key: str, value: Any) -> RequestError:
    """NOTE(int64-bounds): a bound that leaves only numbers past what llguidance builds (its
    f64 saturates to i64's ends, and a range at i64's minimum crashes the process)."""
    return RequestError.field("response_format", f"{key} {shown(value)} leaves only numbers "
                              "past the compiler's range (-2**63 + 1024 to 2**63 - 1)")


def _lower(schema: dict, integral: bool) -> int | None:
    """The inclusive lower bound that replaces the wide ones of ``schema`` (None: none)."""
    least = {math.floor(v) + 1 if k == "exclusiveMinimum" else math.ceil(v): k for k in _LOWER
             if _wide(v := schema.get(k), integral)}
    if not least:
        return None
    n = max(least)
    if n > (_I64_MAX if integral else _HIGH):
        raise _past(least[n], schema[least[n]])
    return _inward(n, True, integral)  # an integer's 2**63 saturates at i64's maximum: exact


def _upper(schema: dict, integral: bool) -> int | None:
    """The inclusive upper bound that replaces the wide ones of ``schema`` (None: none)."""
    most = {math.ceil(v) - 1 if k == "exclusiveMaximum" else math.floor(v): k for k in _UPPER
            if _wide(v := schema.get(k), integral)}
    if not most:
        return None
    n = min(most)
    if n < _LOW:
        raise _past(most[n], schema[most[n]])
    if n >= _I64_MAX and integral:
        return _I64_MAX  # an f64 of 2**63, which llguidance caps at i64's maximum: exact
    return _inward(n, False, integral)


def _short(key: str, value: Any) -> Any:
    """NOTE(int64-bounds): a number's float bound with more than 15 significant digits,
    which llguidance's JSON reader may read an ulp outward, rounded inward to 15 (which any
    f64 keeps exactly); any other value as it is."""
    if not isinstance(value, float) or key not in _LOWER + _UPPER or not math.isfinite(value):
        return value
    digits = decimal.Decimal(repr(value))
    if len(digits.as_tuple().digits) <= 15:
        return value
    inward = decimal.ROUND_CEILING if key in _LOWER else decimal.ROUND_FLOOR
    return float(decimal.Context(prec=15, rounding=inward).plus(digits))


def _moved(key: str, value: Any, integral: bool) -> bool:
    """Whether ``key: value`` is a bound drop_wide_bounds replaces or drops."""
    side = -math.inf if key in _LOWER else math.inf if key in _UPPER else None
    return side is not None and (_wide(value, integral) or value == side)


def drop_wide_bounds(schema: dict) -> dict:
    """NOTE(int64-bounds): the schema object with each bound llguidance may misread moved
    inward to one it reads exactly: past 2**53 (in size), or an integer's float, an inclusive
    bound at an f64; a number's long float, 15 digits. An infinite bound that bounds nothing
    (``minimum`` -inf, ``maximum`` inf) is dropped."""
    kind = schema.get("type")
    integral = kind == "integer" or (isinstance(kind, list) and "integer" in kind
                                     and "number" not in kind)
    low, high = _lower(schema, integral), _upper(schema, integral)
    out = {k: v if integral else _short(k, v) for k, v in schema.items()
           if not _moved(k, v, integral)}
    if low is not None:
        out["minimum"] = max(low, out["minimum"]) if _number(out.get("minimum")) else low
    if high is not None:
        out["maximum"] = min(high, out["maximum"]) if _number(out.get("maximum")) else high
    # by identity: 9007199254740991.0 == 9007199254740991, but llguidance reads them apart
    return schema if len(out) == len(schema) and all(
        out.get(k) is v for k, v in schema.items()) else out
