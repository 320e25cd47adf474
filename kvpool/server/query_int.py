"""An integer query parameter, and a body's int and float fields, as vLLM 0.33 reads them.

FastAPI hands an ``int`` query parameter to pydantic's lax int, which takes a string
(NOTE(lax-int)) as::

    optional whitespace, an optional sign, ASCII digits with single underscores between
    them, optionally a decimal point and zeros ("5.0", "1_000.00"), optional whitespace

and refuses anything else ("5.5", "1e3", "0x10", "5.", "", "1__0"): a 400 whose ``param`` is
``query.NAME``, as vLLM's validation error names a query parameter (query_bool.py,
NOTE(query-bool), reads the booleans the same way). A parameter given more than once is read
from its last value, as FastAPI reads it.

The same table reads a request body's numbers (``json_lax_int`` / ``json_lax_float``: the
body's int and float fields of /v1/completions and /v1/chat/completions go through
json_body.json_int / json_float, which call them), as vLLM's pydantic request models read
them: a JSON bool is 0 or 1, a number without a fraction an int (not past the 64-bit range
pydantic's float-to-int takes), a string the rule above for an int and NOTE(lax-float) for a
float.
"""

from __future__ import annotations

import re

from aiohttp import web

from kvpool.errors import RequestError

__all__ = ["json_lax_float", "json_lax_int", "lax_float", "lax_int", "query_int"]

# NOTE(lax-int): pydantic's lax int of a string (pydantic 2.13 / pydantic-core 2.46): the
# string is trimmed of Unicode whitespace (Rust's ``str::trim``, not Python's ``str.strip``,
# which also strips \x1c-\x1f), then must be the pattern below; a number of more than
# MAX_LAX_INT_DIGITS digits (leading zeros and underscores not counted, a minus sign counted)
# is refused as too big. Checked against that pydantic on 200,000 random short strings: the one
# difference kept is pydantic-core's reading of a sign or "__" after leading zeros ("0-49" is
# -49 there, "0__9" is 9), refused here as the pattern refuses them.
_TRIMMED = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
            "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_LAX_INT = re.compile(r"([+-]?)([0-9](?:_?[0-9])*)(?:\.0+)?")
MAX_LAX_INT_DIGITS = 4300
_NOT_INT = "Input should be a valid integer, unable to parse string as an integer"
_TOO_BIG = "Unable to parse input string as an integer, exceeded maximum size"


def lax_int(text: str) -> int:
    """``text`` as pydantic's lax int reads a string (NOTE(lax-int)); a ValueError with
    pydantic's words when it refuses it."""
    found = _LAX_INT.fullmatch(text.strip(_TRIMMED))
    if found is None:
        raise ValueError(_NOT_INT)
    sign, digits = found.groups()
    digits = digits.replace("_", "").lstrip("0") or "0"
    if len(digits) + (sign == "-") > MAX_LAX_INT_DIGITS:
        raise ValueError(_TOO_BIG)
    return int(sign + digits)


# NOTE(lax-float): pydantic's lax float of a string: trimmed as above, then a decimal number
# (digits with an optional point and fraction, or a point and digits; an optional exponent),
# inf, infinity or nan in any case, each with an optional sign. Underscores are taken only
# when the string has no whitespace to trim, does not start or end with one, and has no
# "__"; they are then dropped ("1_000.5", "+_5", "5_." read; " 1_0", "1__0" do not). Checked
# against that pydantic on 400,000 random short strings of digits, "_.eE+- " and the words.
_LAX_FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                        r"|inf|infinity|nan)", re.IGNORECASE)
_NOT_FLOAT = "Input should be a valid number, unable to parse string as a number"
_INT64 = 1 << 63  # pydantic's float-to-int takes |f| below this only


def lax_float(text: str) -> float:
    """``text`` as pydantic's lax float reads a string (NOTE(lax-float)); else a ValueError."""
    trimmed = text.strip(_TRIMMED)
    if _LAX_FLOAT.fullmatch(trimmed):
        return float(trimmed)
    if "_" not in text or text != trimmed or text[0] == "_" or text[-1] == "_" \
            or "__" in text or not _LAX_FLOAT.fullmatch(text.replace("_", "")):
        raise ValueError(_NOT_FLOAT)
    return float(text.replace("_", ""))


def json_lax_int(value: object, *, strings: bool = True) -> int:
    """A JSON value as a vLLM request model's int field reads it (pydantic's lax int): an
    int, a bool (0 / 1), a number without a fraction, or (unless ``strings`` is off) a string
    ``lax_int`` reads; else a ValueError."""
    if isinstance(value, int):  # a bool too: True is 1
        return int(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("Input should be a valid integer, got a number with a "
                             "fractional part")
        if abs(value) >= _INT64:
            raise ValueError(_TOO_BIG)
        return int(value)
    if isinstance(value, str) and strings:
        return lax_int(value)
    raise ValueError("Input should be a valid integer")


def json_lax_float(value: object) -> float:
    """A JSON value as a vLLM request model's float field reads it (pydantic's lax float): a
    number, a bool (0.0 / 1.0) or a string ``lax_float`` reads; else a ValueError."""
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an int past the float range
            raise ValueError("Input should be a finite number") from None
    if isinstance(value, str):
        return lax_float(value)
    raise ValueError("Input should be a valid number")


def query_int(request: web.Request, name: str) -> int | None:
    """Query parameter ``name`` as an int (None when absent; the last value when repeated); a
    value vLLM would refuse is a 400 naming ``query.NAME``."""
    values = request.query.getall(name, [])
    if not values:
        return None
    try:
        return lax_int(values[-1])
    except ValueError as exc:
        raise RequestError(f"{name}: {exc}", param=f"query.{name}") from None
