"""A boolean query parameter as vLLM 0.33 reads it (the integers: query_int.py)."""

from __future__ import annotations

from aiohttp import web

from kvpool.errors import RequestError
from kvpool.server.json_body import LAX_BOOL_STRINGS

__all__ = ["query_bool"]

# NOTE(query-bool): the strings vLLM's query parsing reads as booleans (FastAPI hands a bool
# query parameter to pydantic's lax bool): json_body.py's NOTE(lax-bool) table, every route


def query_bool(request: web.Request, name: str) -> bool:
    """NOTE(query-bool): query parameter ``name`` as a boolean (False when absent; the last
    one when given more than once, as FastAPI reads it); a value vLLM would refuse is a 400
    naming it as vLLM's validation error does (``query.NAME``)."""
    values = request.query.getall(name, [])
    if not values:
        return False
    value = LAX_BOOL_STRINGS.get(values[-1].lower())
    if value is None:
        raise RequestError(f"{name}: Input should be a valid boolean, unable to interpret "
                           "input (use true or false)", param=f"query.{name}")
    return value
