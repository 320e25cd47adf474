"""A request body's bytes -> one JSON object, every failure a 400 with param None.

The body must be UTF-8 JSON (no NaN/Infinity; a leading byte order mark is ignored, as
vLLM's server ignores it and RFC 8259 section 8.1 allows), an object, nested at most
``max_json_depth``, without lone UTF-16 surrogate escapes, and hold no more JSON values than a
request that fits the context can (NOTE(gil) below: counted on the raw bytes, before
``json.loads`` holds the GIL), nor a string longer than any string of a fitting request
(NOTE(string-bound) in protocol.py; refused from the raw bytes before decoding too, naming its
field).

NOTE(gil): parsing on a worker thread does not keep the event loop free while ``json.loads``
runs: the C scanner holds the GIL for the whole call, and its cost grows with the values it
builds, not bytes (a 4 MB string parses in ~8 ms; 2M token ids take ~0.1 s; 1.9M arrays,
16,000 nested 120 deep in 3.9 MB, ~0.65 s: all of it a stall of every stream and /health). So
bodies with more values than any request that fits can hold are refused before the parse,
counted by ``structural_commas`` (json_bound.py) as the bytes that add a value outside
strings: each comma adds one to its array or object, and each ``[`` or ``{`` opens one (commas
alone let the nested arrays through: 16,001 of them). A body holds at most one value more:

::

    {"prompt": [0,0,0], "stop": ["a,b"]}
    ^          ^ ^ ^  ^         ^  ^ inside a string: adds no value
    counted = 3 commas + 3 openings = 6;  values = 7 (the object, 2 lists, 3 ids, a string)

NOTE(nesting-bomb): a value count past the bound used to be answered as a context length
problem whatever held the values, and 200,000 nested arrays (``[[[...]]]``, no comma) got "this
model's maximum context length is 8192 tokens". Counts say more: with few commas, many arrays
and objects can only be nested (json_bound.py NOTE(depth-floor)), so a body whose counts need
more than ``max_json_depth`` levels gets the 400 of a body parsed too deep, "nested deeper
than" the bound, with the counts that show it, through the router too (it leaves such a
body to the replica: relayed.py). A nest within the value bound is parsed, and Python's
recursion limit (past the bound) or the walk below answers it the same way. vLLM's
FastAPI answers a body its ``json.loads`` cannot nest a 400 too ("There was an error parsing
the body").

NOTE(schema-values): a JSON schema is not prompt: a 619 KB ``response_format`` schema (90,000
``examples``) was refused as ``context_length_exceeded``, though the schema cap is 1 MiB. So the
bound of a body that holds a schema-carrying key (``_SCHEMA_KEYS``, one C scan each, made only
past the prompt's bound) adds what a schema within that cap can hold (SCHEMA_VALUES: each
counted byte, a comma or an opening, needs one more byte for its value or its closing, so at
most 2 in 3 bytes, plus one nest of MAX_JSON_DEPTH); past that, the 400 names both limits. A
body without one keeps the prompt's bound and its context-length 400. The GIL bound holds, as
long as a 1 MiB schema's own parse: 700,000 values more, at worst 1 MiB of ``[],`` (65 ms
here, where the 1.9M arrays above took 0.65 s); millions of values are still refused unread.

The count must not itself hold the GIL long: three ``bytes.count`` C scans bound it from
above, and a body under the limit is parsed with no further work; only past it are the ones
inside strings subtracted (Python-level work, one ``bytes.find`` per quote: it yields the GIL).

``ParsePool``: a request body parsed off the event loop once it is large enough to matter.

NOTE(parse-off-loop): tokenizing a megabyte prompt takes seconds; on the event loop it froze
every stream and /health. Bodies over ``INLINE_PARSE_BYTES`` are parsed (JSON, validation,
tokenization) on a small dedicated thread pool (``PARSE_THREADS`` workers bound how many run at
once; the rest wait in its queue) while the loop keeps serving. The parser refuses prompts too
long to fit before tokenizing them (protocol.py, NOTE(bounded-work)), and bounds a body's value
count and string lengths before ``json.loads`` holds the GIL (NOTE(gil)).

Every route that parses a client body goes through one pool (the app's), so the bound on
parses at once holds across routes.

NOTE(json-only): as vLLM's ``validate_json_request`` (on its chat, completions, Responses,
tokenize and detokenize routes), a body whose Content-Type media type is not
``application/json`` (``text/plain``, a form, ``application/octet-stream``, none: curl's
``-d`` without ``-H``) is a 400 once read (a body too large or too slow keeps its 413 / 408),
before it is parsed, even when the bytes are JSON. vLLM raises it as a RequestValidationError,
which its server answers 400 (older vLLM: 415); parameters such as ``charset`` and the case of
the type do not matter. ``/v1/kvpool/lookup`` (the router fans the client's own request out
to it) stays lenient: the generation route refuses such a body.

The worker thread does not see the handler's context variables (``run_in_executor`` does not
copy them): a parse must not read the request's tenant; the caller reads it on the loop.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from kvpool.errors import RequestError, context_length_error, shown
from kvpool.server.body_coding import inflate, left_encoded, refuse_from_head
from kvpool.server.json_bound import (depth_floor, key_before, longest_string_over,
                                      structural_commas)
from kvpool.server.query_int import json_lax_float, json_lax_int

__all__ = ["DEFAULT_BODY_TIMEOUT", "DEFAULT_MAX_BODY_BYTES", "INLINE_PARSE_BYTES",
           "LAX_BOOL_STRINGS", "MAX_JSON_BYTES_PER_CHAR", "MAX_JSON_DEPTH", "PARSE_THREADS",
           "SCHEMA_VALUES", "ParsePool", "bool_field", "decode_json_body", "decode_json_text",
           "json_bool", "json_float", "json_int", "require_json", "structural_commas"]

# the server's and the router's default body bounds (the router passes bodies on unchanged)
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # token-id prompts of a 128k context fit easily
# NOTE(json-depth): vLLM (FastAPI / pydantic) bounds a body's nesting only by Python's recursion
# limit; at 32 a tool schema about 14 objects deep (an OpenAPI-generated tool: each object level
# is two, "properties" and the key) was a 400 even with tool_choice none. 128 takes a 60-level
# schema, and every recursive walk of a body (the schema walks of grammar.py and tools/, the
# chat template's tojson, llguidance's compile) stays far below the recursion limit at it.
MAX_JSON_DEPTH = 128

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_STRING_FIELDS = frozenset({"prompt", "messages", "stop", "user"})  # named in a too-long 400
# NOTE(bytes-per-char): the most JSON bytes one character of a decoded string can take: a
# code point outside the BMP written as an escaped surrogate pair (``\ud83d\ude00``) is
# 12 bytes; raw UTF-8 is at most 4, a BMP escape 6
MAX_JSON_BYTES_PER_CHAR = 12

# NOTE(schema-values): values a JSON schema within its cap (grammar.py MAX_SCHEMA_CHARS, 1 MiB;
# not imported: the router reads bodies here without the grammar compiler) may hold
SCHEMA_VALUES = 2 * (1024 * 1024) // 3 + MAX_JSON_DEPTH
# keys that carry a schema: response_format's and text.format's "schema", guided_json,
# structured_outputs' "json", a tool's "parameters"
_SCHEMA_KEYS = (b'"schema"', b'"guided_json"', b'"json"', b'"parameters"')

UTF8_BOM = codecs.BOM_UTF8  # a body may open with it (ignored)
INLINE_PARSE_BYTES = 8192  # smaller bodies tokenize in well under a ms: a thread hop costs more
PARSE_THREADS = 2  # parses of large bodies running at once
DEFAULT_BODY_TIMEOUT = 60.0  # seconds a whole request body may take to arrive (0: no bound)

T = TypeVar("T")


def _bad(message: str, code: str) -> RequestError:
    return RequestError(message, param=None, code=code)


def _bound_values(raw: bytes, counted: int, limit: int, max_model_len: int,
                  max_json_depth: int) -> None:
    """NOTE(schema-values): a body ``counted`` past the prompt's ``limit`` is refused, naming
    the context length, unless it holds a schema, whose share (SCHEMA_VALUES) it may use;
    one whose counts say it nests past ``max_json_depth``, naming that (NOTE(nesting-bomb))."""
    if (deep := depth_floor(raw, counted, max_json_depth)) is not None:
        raise _bad(f"request body is nested deeper than {max_json_depth}: JSON with "
                   f"{deep[0]} arrays and objects and {deep[1]} commas nests at least "
                   f"{deep[2]} levels deep", "invalid_json")
    said = (f"the request body holds up to {counted + 1} JSON values (each array and object "
            "counted), more than a request that fits can hold")
    if not any(key in raw for key in _SCHEMA_KEYS):
        raise context_length_error(max_model_len, said)
    if counted > limit + SCHEMA_VALUES:
        raise _bad(f"{said}: a prompt within the model's maximum context length of "
                   f"{max_model_len} tokens with a JSON schema within its 1 MiB cap hold at "
                   f"most {limit + SCHEMA_VALUES + 1}", "too_many_values")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode_json_body(raw: bytes, *, max_json_depth: int, max_body_commas: int,
                     max_model_len: int, max_string_bytes: int | None = None) -> dict[str, Any]:
    # vLLM's server (starlette) decodes with json.loads(bytes), which skips a UTF-8 BOM
    raw = raw[len(UTF8_BOM):] if raw.startswith(UTF8_BOM) else raw
    counted = structural_commas(raw, max_body_commas)  # NOTE(gil)
    if counted > max_body_commas:  # exact once past it
        _bound_values(raw, counted, max_body_commas, max_model_len, max_json_depth)
    if max_string_bytes is not None:
        found = longest_string_over(raw, max_string_bytes)
        if found is not None:  # before decoding, too (NOTE(string-bound))
            key = key_before(raw, found[0])
            param = "messages" if key == "content" else key if key in _STRING_FIELDS else None
            raise context_length_error(max_model_len, f"the request body holds a string of "
                                       f"{found[1]} bytes, more characters than that many "
                                       "tokens can hold, which leaves no room to generate",
                                       param)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(f"request body is not valid UTF-8 (byte {exc.start})",
                   "invalid_encoding") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:  # deeper than Python's recursion limit, so past the bound too
        raise _bad(f"request body is nested deeper than {max_json_depth}",
                   "invalid_json") from None
    except ValueError as exc:
        raise _bad(f"request body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(body, dict):
        raise _bad(f"request body must be a JSON object, got {type(body).__name__}",
                   "invalid_json")
    # NOTE(fast-path): walking a 1M-id prompt costs ~0.2 s of event loop; the raw text says
    # whether the walk can find anything (few brackets; no \uD8xx-\uDFxx escape).
    # (counted on the bytes: ~5x faster than on the str, and all of it holds the GIL)
    if raw.count(b"{") + raw.count(b"[") > max_json_depth or _SURROGATE_ESCAPE.search(text):
        _check_structure(body, max_json_depth)
    return body


JSON_MEDIA_TYPE = "application/json"


def require_json(request: web.Request) -> None:
    """NOTE(json-only): a 400 unless the body is sent as ``application/json``."""
    if request.content_type == JSON_MEDIA_TYPE:
        return
    sent = request.headers.get("Content-Type")
    said = "no Content-Type" if sent is None else f"Content-Type {shown(sent)}"
    raise _bad(f"Unsupported Media Type: Only 'application/json' is allowed (the request "
               f"has {said})", "unsupported_media_type")


def json_int(value: Any, *, strings: bool = True) -> int | None:
    """``value`` as a vLLM request model's int field reads it (pydantic's lax int,
    NOTE(lax-int) in query_int.py): an int, a bool (0 / 1), a number without a fraction
    (``3.0``), a string such as ``"3"`` unless ``strings`` is off; else None."""
    try:
        return json_lax_int(value, strings=strings)
    except ValueError:
        return None


def json_float(value: Any) -> float | None:
    """``value`` as a vLLM request model's float field reads it (pydantic's lax float,
    NOTE(lax-float) in query_int.py): a number, a bool, a string such as ``"0.5"``; else
    None."""
    try:
        return json_lax_float(value)
    except ValueError:
        return None


# NOTE(lax-bool): the strings pydantic's lax bool reads (vLLM's request models and FastAPI's
# query parameters take a bool through it), compared lower-cased; json_bool and
# query_bool (query_bool.py) share this one table
LAX_BOOL_STRINGS = {**dict.fromkeys(("1", "on", "t", "true", "y", "yes"), True),
                    **dict.fromkeys(("0", "off", "f", "false", "n", "no"), False)}


def json_bool(value: Any) -> bool | None:
    """``value`` as a vLLM request model's bool field reads it (NOTE(lax-bool)): a bool, the
    numbers 0 and 1 (``1.0`` too), or one of the strings; else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    return LAX_BOOL_STRINGS.get(value.lower()) if isinstance(value, str) else None


def bool_field(body: dict[str, Any], name: str, default: Any = None, *,
               param: str | None = None) -> Any:
    """The bool field ``name`` of a request body as vLLM's request models read it
    (``json_bool``, NOTE(lax-bool)): ``default`` when absent or null; anything json_bool does
    not read is a 400 naming ``param`` (default: ``name``)."""
    value = body.get(name)
    if value is None:
        return default
    got = json_bool(value)
    if got is None:
        raise RequestError.field(param or name, f"must be a boolean (true, false, or what vLLM "
                                 f'reads as one: 0, 1, "yes", "no", ...), got '
                                 f"{json.dumps(value)[:50]}")
    return got


def decode_json_text(text: str, param: str, what: str,
                     max_json_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON text inside a request field (tool-call arguments, a schema sent as a string): the
    body's rules (no NaN, nested at most ``max_json_depth``), each failure a 400 naming
    ``param``; ``what`` says what the field must be. A deep nest is refused, not a 500 from
    Python's recursion limit."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
        _check_structure(value, max_json_depth)
    except RecursionError:
        raise RequestError.field(param, f"must be {what}; it is nested too deeply",
                                 "invalid_json") from None
    except RequestError as exc:  # "request body is nested deeper than 32" -> "it is ..."
        said = str(exc).removeprefix("request body ")
        raise RequestError.field(param, f"must be {what}; it {said}", exc.code) from None
    except ValueError:
        raise RequestError.field(param, f"must be {what}", "invalid_json") from None
    return value


def _check_structure(body: Any, max_json_depth: int) -> None:
    """Depth bound, and no lone UTF-16 surrogates (``"\\ud800"`` is valid JSON but not text any
    tokenizer or hash can encode)."""
    stack = [(body, 1)] if isinstance(body, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > max_json_depth:
            raise _bad(f"request body is nested deeper than {max_json_depth}", "invalid_json")
        items = list(node.items()) if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            for text in (key, child):
                if isinstance(text, str) and not text.isascii():
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError:
                        raise _bad("request body holds a lone UTF-16 surrogate escape (e.g. "
                                   "\\ud800)", "invalid_encoding") from None
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))


class ParsePool:
    """Runs ``parse(raw)`` inline for a small body, on the pool's threads for a large one."""

    def __init__(self, threads: int = PARSE_THREADS, *,
                 inline_bytes: int = INLINE_PARSE_BYTES, name: str = "kvpool-parse") -> None:
        self.parsing = 0  # large bodies being parsed on the pool now (tests watch it)
        self.offloaded = 0  # large bodies handed to the pool so far (monotonic)
        self.inline_bytes = inline_bytes  # bodies up to this size are parsed on the caller
        self.body_timeout = DEFAULT_BODY_TIMEOUT  # NOTE(slow-body); kvpool serve --body-timeout
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=name)

    async def read(self, request: web.Request) -> bytes:
        """The whole body (``arrived``), decoded when the client compressed it: on the pool's
        threads, never past the app's body bound (NOTE(inflate) in body_coding.py)."""
        raw = await self.arrived(request)
        coding = left_encoded(request)
        if coding is None:
            return raw
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, inflate, raw, coding, request.client_max_size)

    async def arrived(self, request: web.Request) -> bytes:
        """The whole body as it came. NOTE(slow-body): the header timer (connections.py)
        bounds a request head; a body trickled a byte at a time would hold its handler and
        connection for ever, so the whole body must arrive within ``body_timeout`` or the
        client gets 408 (what was read is dropped; nothing else is touched). aiohttp then
        reads what still comes for at most its lingering time (NOTE(linger) in
        connections.py) and closes. NOTE(read-cancel): ``asyncio.timeout``, not
        ``wait_for``: on Python 3.11 wait_for returns the body when its task is cancelled in
        the step the read finished (CPython gh-86296), where aiohttp's cancel for a client
        that sent its body and closed lands: such requests were served (the router:
        relayed) for nobody. What the head alone refuses (NOTE(declared), a transfer coding
        not read here) is refused before any of the body is read (body_coding.py)."""
        refuse_from_head(request)
        if self.body_timeout <= 0:
            return await request.read()
        try:
            async with asyncio.timeout(self.body_timeout):
                return await request.read()
        except TimeoutError:
            raise web.HTTPRequestTimeout(text=f"the request body did not arrive within "
                                         f"{self.body_timeout:g} s (--body-timeout)") from None

    async def read_and_parse(self, request: web.Request, parse: Callable[[bytes], T], *,
                             json_only: bool = True) -> T:
        """``parse`` of the whole body (``read``, then ``parse`` below); unless ``json_only``
        is off, a body not sent as JSON is refused once read (NOTE(json-only))."""
        raw = await self.read(request)
        if json_only:
            require_json(request)
        return await self.parse(raw, parse)

    async def parse(self, raw: bytes, parse: Callable[[bytes], T]) -> T:
        if len(raw) <= self.inline_bytes:
            return parse(raw)
        self.parsing += 1
        self.offloaded += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, parse, raw)
        finally:
            self.parsing -= 1

    def close(self) -> None:
        """Stop the pool (the app's cleanup); a parse still running finishes first."""
        self._pool.shutdown(wait=False, cancel_futures=True)
