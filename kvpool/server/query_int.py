"""An integer query parameter as vLLM 0.33's FastAPI routes read one.

FastAPI hands an ``int`` query parameter to pydantic's lax int, which takes a string
(NOTE(lax-int)) as::

    optional whitespace, an optional sign, ASCII digits with single underscores between
    them, optionally a decimal point and zeros ("5.0", "1_000.00"), optional whitespace

and refuses anything else ("5.5", "1e3", "0x10", "5.", "", "1__0"): a 400 whose ``param`` is
``query.NAME``, as vLLM's validation error names a query parameter (middleware.query_bool,
NOTE(query-bool), reads the booleans the same way). A parameter given more than once is read
from its last value, as FastAPI reads it.
"""

from __future__ import annotations

import re

from aiohttp import web

from kvpool.errors import RequestError

__all__ = ["lax_int", "query_int"]

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
