"""Property-based fuzzing of ``kvpool serve``'s HTTP boundary: one real server process on
127.0.0.1 for the module, bodies built from the routes' own field lists (body_fields.py,
responses_input.py) with every value mutated (wrong types, NaN/Infinity literals, 1e308, huge
and negative ints, empty and long strings, lone surrogate escapes, NUL, RTL, nested junk),
duplicate keys, non-object top levels, wrong content types and gzip/deflate bodies that lie.

Properties (the error table of kvpool/server/middleware.py's docstring): every answer
is a 2xx of the route's shape or a 4xx carrying OpenAI's error JSON; never a 5xx, never a
non-JSON error, never past ``BOUND`` seconds. After each test the pool's free blocks are back
to where they started and a temperature-0 request gives the same text as before the fuzz; the
server logs no traceback.
"""

from __future__ import annotations

import gzip
import http.client
import io
import json
import math
import socket
import subprocess
import time
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvpool.server import serve
from kvpool.server.body_fields import (KNOWN_CHAT, KNOWN_COMPLETION, KNOWN_DETOKENIZE,
                                       KNOWN_TOKENIZE)
from kvpool.server.responses_input import KNOWN_RESPONSES
from tests.server.helpers import ROOT, parse_metrics, stop_process
from tests.server.serve_process import serve_command

BOUND = 15.0  # seconds any one answer may take (a hang fails the test)
EXAMPLES = 150  # per test: the module runs in well under 20 s on 2 cores
MODEL = "kvpool-tiny"
CHAT = [{"role": "user", "content": "hi"}]
ROUTES: dict[str, tuple[frozenset[str], dict[str, Any]]] = {
    "/v1/completions": (KNOWN_COMPLETION, {"model": MODEL, "prompt": "hi", "max_tokens": 2}),
    "/v1/chat/completions": (KNOWN_CHAT, {"model": MODEL, "messages": CHAT, "max_tokens": 2}),
    "/v1/responses": (KNOWN_RESPONSES, {"model": MODEL, "input": "hi",
                                        "max_output_tokens": 2}),
    "/tokenize": (KNOWN_TOKENIZE, {"model": MODEL, "prompt": "hi"}),
    "/detokenize": (KNOWN_DETOKENIZE, {"model": MODEL, "tokens": [5, 6]}),
}
SHAPES = {"/v1/completions": "text_completion", "/v1/chat/completions": "chat.completion",
          "/v1/responses": "response"}
REFERENCE = {"model": MODEL, "prompt": "The quick brown fox", "max_tokens": 8,
             "temperature": 0, "seed": 0, "ignore_eos": True}

# ---- values -----------------------------------------------------------------------------

ODD_NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -0.0, -1,
                               0, 1.5, 3.0, 2**31, 2**63, -(2**63), 10**30, -(10**40)])
ODD_STRINGS = st.sampled_from(["", "\ud800", "a\udfffb", "\udbff\udc00", "\x00", "a\x00b",
                               "\u202e\u0645\u0631\u062d\u0628\u0627", "\ufeff", "\U0001f600",
                               "\r\n", "null", "1", "{}", "x" * 3000, "\u00e9" * 700,
                               "<|im_start|>", "{{ 7*7 }}", "{% for %}"])
SCALARS = (st.none() | st.booleans() | ODD_NUMBERS | st.integers() | st.floats()
           | ODD_STRINGS | st.text(max_size=12))
JUNK = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4)
                    | st.dictionaries(st.text(max_size=6) | ODD_STRINGS, kids, max_size=4),
                    max_leaves=10)
ROLES = st.sampled_from(["user", "system", "assistant", "tool", "developer", "function"])


def shaped(keys: dict[str, Any]) -> st.SearchStrategy:
    """An object with some of ``keys`` (each value its strategy or junk)."""
    return st.fixed_dictionaries({}, optional={k: v | JUNK for k, v in keys.items()})


PART = shaped({"type": st.sampled_from(["text", "image_url", "input_text", "refusal"]),
               "text": ODD_STRINGS, "image_url": shaped({"url": ODD_STRINGS})})
FUNCTION = shaped({"name": ODD_STRINGS, "arguments": ODD_STRINGS,
                   "parameters": shaped({"type": st.just("object"), "properties": JUNK})})
TOOL_CALL = shaped({"id": ODD_STRINGS, "type": st.just("function"), "function": FUNCTION})
MESSAGE = shaped({"role": ROLES, "content": ODD_STRINGS | st.lists(PART, max_size=3),
                  "tool_calls": st.lists(TOOL_CALL, max_size=2), "name": ODD_STRINGS,
                  "tool_call_id": ODD_STRINGS, "reasoning_content": ODD_STRINGS})
TOOL = shaped({"type": st.sampled_from(["function", "web_search", "mcp"]), "function": FUNCTION,
               "name": ODD_STRINGS, "parameters": JUNK})
FORMAT = shaped({"type": st.sampled_from(["json_schema", "json_object", "text", "regex",
                                          "structural_tag", "grammar"]),
                 "json_schema": shaped({"name": ODD_STRINGS, "schema": JUNK, "strict": JUNK}),
                 "schema": JUNK, "structures": JUNK, "triggers": JUNK})
ITEM = shaped({"type": st.sampled_from(["message", "function_call", "function_call_output",
                                        "reasoning", "input_text"]),
               "role": ROLES, "content": ODD_STRINGS | st.lists(PART, max_size=2),
               "call_id": ODD_STRINGS, "output": ODD_STRINGS, "arguments": ODD_STRINGS,
               "name": ODD_STRINGS})
TOKEN_LISTS = st.lists(st.integers(-5, 2**33) | ODD_NUMBERS, max_size=6)
NEAR: dict[str, st.SearchStrategy] = {
    "messages": st.lists(MESSAGE, max_size=3), "tools": st.lists(TOOL, max_size=2),
    "tool_choice": st.sampled_from(["auto", "none", "required"]) | TOOL,
    "response_format": FORMAT, "text": shaped({"format": FORMAT}),
    "input": ODD_STRINGS | st.lists(ITEM, max_size=3),
    "prompt": ODD_STRINGS | TOKEN_LISTS | st.lists(TOKEN_LISTS | ODD_STRINGS, max_size=3),
    "tokens": TOKEN_LISTS, "stop": st.lists(ODD_STRINGS, max_size=5),
    "logit_bias": st.dictionaries(ODD_STRINGS | st.sampled_from(["5", "-1", "99999999"]),
                                  ODD_NUMBERS, max_size=3),
    "stream_options": shaped({"include_usage": JUNK, "continuous_usage_stats": JUNK}),
    "chat_template_kwargs": st.dictionaries(st.text(max_size=8), JUNK, max_size=3),
    "reasoning": shaped({"effort": st.sampled_from(["low", "high", "x"]), "summary": JUNK}),
    "structured_outputs": shaped({"json": JUNK, "regex": ODD_STRINGS, "choice": JUNK,
                                  "grammar": ODD_STRINGS}),
}


def value_for(name: str) -> st.SearchStrategy:
    return NEAR[name] | JUNK if name in NEAR else JUNK


@st.composite
def bodies(draw, route: str) -> dict[str, Any]:
    """The route's minimal valid body with some known fields (and maybe unknown ones) set to
    mutated values."""
    known, base = ROUTES[route]
    names = draw(st.lists(st.sampled_from(sorted(known)), max_size=4, unique=True))
    body = dict(base)
    for name in names:
        body[name] = draw(value_for(name))
    if draw(st.booleans()):
        body["stream"] = True
    if draw(st.integers(0, 9)) == 0:
        body.pop(draw(st.sampled_from(sorted(base))), None)
    if draw(st.integers(0, 9)) == 0:
        body[draw(st.text(max_size=8) | ODD_STRINGS)] = draw(JUNK)
    return body

# ---- bytes on the wire ------------------------------------------------------------------

CONTENT_TYPES = st.sampled_from([
    "application/json", "application/json; charset=utf-8", "APPLICATION/JSON", None, "",
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/json; charset=latin-1", "*/*", "application/octet-stream"])
HEADERS = st.lists(st.sampled_from([
    "Expect: 100-continue", "Expect: weird", "Expect: ", "Accept-Encoding: gzip, br, zstd",
    "Accept: text/event-stream", "X-Request-Id: " + "r" * 300, "X-Request-Id: \xe9\x00",
    "Authorization: Bearer \xff", "Origin: http://evil.example",
    "Content-Language: \xe2\x80\xae", "Transfer-Encoding: identity"]), max_size=2, unique=True)
ENCODINGS = st.sampled_from([None] * 6 + ["gzip", "deflate", "gzip-lies", "gzip-cut",
                                          "gzip-claimed", "gzip-bomb", "br", "identity",
                                          "gzip, gzip"])


def gzip_lying_about_size(raw: bytes) -> bytes:
    """A gzip member whose trailer (ISIZE) claims 4 GiB - 1 decompressed bytes."""
    z = gzip.compress(raw)
    return z[:-4] + (2**32 - 1).to_bytes(4, "little")


def content_encoded(raw: bytes, encoding: str | None) -> tuple[bytes, str | None]:
    if encoding == "gzip":
        return gzip.compress(raw), "gzip"
    if encoding == "deflate":
        return zlib.compress(raw), "deflate"
    if encoding == "gzip-lies":
        return gzip_lying_about_size(raw), "gzip"
    if encoding == "gzip-cut":
        return gzip.compress(raw)[: max(10, len(raw) // 3)], "gzip"
    if encoding == "gzip-bomb":  # ~5 KiB that inflate past the 4 MiB body bound
        return gzip.compress(raw + b" " * (5 << 20), compresslevel=1), "gzip"
    if encoding == "gzip-claimed":
        return raw, "gzip"  # says gzip, is not
    return raw, encoding


def tame(value: Any) -> Any:
    """``value`` without NaN/Infinity (-> 1e308) and lone surrogates (-> U+FFFD), which the
    body's decoder refuses before any field is read."""
    if isinstance(value, float) and not math.isfinite(value):
        return math.copysign(1e308, value)
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode() if not value.isascii() else value
    if isinstance(value, list):
        return [tame(v) for v in value]
    if isinstance(value, dict):
        return {tame(k): tame(v) for k, v in value.items()}
    return value


@st.composite
def wire_bodies(draw, body: dict[str, Any]) -> bytes:
    """``body`` as JSON bytes, or mangled: a duplicate key, another top-level value, cut
    short, raw bytes, or lone surrogates written as UTF-8 (not escaped)."""
    ascii_only = draw(st.booleans())
    if draw(st.integers(0, 3)):  # mostly without the few values every parse refuses first
        body = tame(body)
    text = json.dumps(body, allow_nan=True, ensure_ascii=ascii_only)
    raw = text.encode("utf-8", "surrogatepass")
    kind = draw(st.sampled_from(["plain"] * 6 + ["dup", "top", "cut", "bytes"]))
    if kind == "dup":
        key = draw(st.sampled_from(sorted(body)) | st.text(max_size=4))
        extra = json.dumps({key: draw(JUNK)}, allow_nan=True)[1:-1].encode()
        raw = raw[:-1] + b", " + extra + b"}"
    elif kind == "top":
        raw = json.dumps(draw(JUNK.filter(lambda v: not isinstance(v, dict))),
                         allow_nan=True).encode()
    elif kind == "cut":
        raw = raw[:draw(st.integers(0, max(0, len(raw) - 1)))]
    elif kind == "bytes":
        raw = draw(st.binary(max_size=64))
    return raw


def request_bytes(route: str, raw: bytes, ctype: str | None, encoding: str | None,
                  headers: tuple[str, ...] = ()) -> bytes:
    payload, said = content_encoded(raw, encoding)
    head = [f"POST {route} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
            f"Content-Length: {len(payload)}", *headers]
    if ctype is not None:
        head.append(f"Content-Type: {ctype}")
    if said is not None:
        head.append(f"Content-Encoding: {said}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload

# ---- the client and the properties ------------------------------------------------------


class _Canned:
    """Bytes read off a socket, as a socket for ``http.client.HTTPResponse`` (chunked bodies,
    headers parsed by the standard library)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, *_: Any) -> io.BytesIO:
        return io.BytesIO(self.data)


def exchange(port: int, wire: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``wire`` on a fresh connection, read until the server closes (within BOUND)."""
    deadline = time.monotonic() + BOUND
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as sock:
        sock.sendall(wire)
        chunks = []
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"no complete answer within {BOUND} s") from None
            if not chunk:
                break
            chunks.append(chunk)
    resp = http.client.HTTPResponse(_Canned(b"".join(chunks)))  # type: ignore[arg-type]
    resp.begin()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()


def check_error(data: bytes) -> None:
    err = json.loads(data)["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert err["type"] == "invalid_request_error", err
    assert err["param"] is None or isinstance(err["param"], str), err
    assert err["code"] is None or isinstance(err["code"], str), err


def check_events(data: bytes) -> None:
    """An SSE stream: every data line JSON (or [DONE]), no server error inside."""
    for line in data.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        assert isinstance(event, dict), line
        if "error" in event:
            assert event["error"].get("type") != "server_error", line
        assert event.get("type") not in ("error", "response.failed"), line


def check_success(route: str, data: bytes) -> None:
    out = json.loads(data)
    if route in SHAPES:
        assert out["object"] == SHAPES[route], out
        listed = out["output"] if route == "/v1/responses" else out["choices"]
        assert isinstance(listed, list) and isinstance(out["usage"], dict), out
    elif route == "/tokenize":
        assert all(isinstance(t, int) for t in out["tokens"]) and out["count"] == len(
            out["tokens"]), out
    else:
        assert isinstance(out["prompt"], str), out


def check_answer(route: str, answer: tuple[int, dict[str, str], bytes], wire: bytes) -> None:
    status, headers, data = answer
    what = f"{status} {data[:400]!r} for {wire[:600]!r}"
    assert 200 <= status < 500, what
    ctype = headers.get("content-type", "")
    try:
        if status >= 300:
            assert ctype.startswith("application/json"), ctype
            check_error(data)
        elif ctype.startswith("text/event-stream"):
            check_events(data)
        else:
            check_success(route, data)
    except (AssertionError, ValueError, KeyError, TypeError) as exc:
        raise AssertionError(f"{what}: {exc!r}") from None

# ---- one server for the module ----------------------------------------------------------

SERVE_FLAGS = ("--host", "127.0.0.1", "--port", "0", "--num-device-blocks", "32",
               "--num-host-blocks", "0", "--max-model-len", "256", "--max-tokens-limit", "16",
               "--num-threads", "1", "--log-level", "warning")


class Served:
    """The ``kvpool serve`` process, its port, its log file, and its state before the fuzz."""

    def __init__(self, tmp_path) -> None:
        self.log = tmp_path / "serve.log"
        with open(self.log, "wb") as out:  # a file: a pipe nobody reads would block the server
            self.proc = subprocess.Popen([*serve_command(), *SERVE_FLAGS], cwd=ROOT,
                                         stdout=out, stderr=subprocess.STDOUT)
        self.port = self._wait_ready(90.0)
        self.free0 = self.free()
        self.text0 = self.reference_text()

    def _wait_ready(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            for line in self.log.read_text(errors="replace").splitlines():
                if line.startswith(serve.READY_PREFIX):
                    return int(line.removeprefix(serve.READY_PREFIX).split()[0].split(":")[1])
            time.sleep(0.1)
        self.stop()
        raise AssertionError("server did not start:\n" + self.log.read_text(errors="replace"))

    def get(self, path: str, body: dict | None = None) -> tuple[int, dict[str, str], bytes]:
        if body is None:
            wire = f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()
        else:
            wire = request_bytes(path, json.dumps(body).encode(), "application/json", None)
        return exchange(self.port, wire)

    def free(self) -> int:
        """Device blocks no request holds: empty or only cached (what the engine's
        num_free_blocks counts, the conftest fixtures' leak check)."""
        metrics = parse_metrics(self.get("/metrics")[2].decode())
        device = (("tier", "device"),)
        return int(metrics["kvpool_free_blocks"][device] + metrics["kvpool_cached_blocks"][device])

    def reference_text(self) -> str:
        status, _, data = self.get("/v1/completions", REFERENCE)
        assert status == 200, data
        return json.loads(data)["choices"][0]["text"]

    def settled(self) -> None:
        """No block leaked, the same temperature-0 text as before the fuzz."""
        deadline = time.monotonic() + 10
        while self.free() != self.free0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.free() == self.free0, f"{self.free0 - self.free()} blocks leaked"
        assert self.reference_text() == self.text0

    def stop(self) -> str:
        stop_process(self.proc)
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("fuzz"))
    yield s
    log = s.stop()
    assert "Traceback" not in log and " ERROR " not in log, log[-4000:]


FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_fuzzed_bodies_get_a_2xx_or_openai_4xx(served, route):
    @FUZZ
    @given(st.data())
    def fuzz(data):
        raw = data.draw(wire_bodies(data.draw(bodies(route))))
        ctype = data.draw(st.sampled_from(["application/json"] * 3) | CONTENT_TYPES)
        wire = request_bytes(route, raw, ctype, data.draw(ENCODINGS),
                             tuple(data.draw(HEADERS)))
        check_answer(route, exchange(served.port, wire), wire)

    fuzz()
    served.settled()
