"""Hypothesis fuzzing of the request schema against a real server on 127.0.0.1.

Bodies mix valid values, out-of-range numbers, wrong types and junk for every OpenAI field the
server knows (and some it does not). Whatever comes in: never a 5xx, every answer is JSON (or a
complete SSE stream), the engine stays healthy, and after the last example every block is back.
Bounded: a fixed number of examples, short generations (the server caps max_tokens at 8).
"""

from __future__ import annotations

import http.client
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stress.http.servers import InProcessServer
from tests.stress.conftest import assert_clean, stress_config

FUZZ_LIMITS = dict(max_model_len=128, max_tokens_limit=8, max_n=3, max_stop=3,
                   num_device_blocks=48)

junk = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
    st.text(max_size=12), st.lists(st.integers(-3, 600), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(-2, 2), max_size=2))

# field -> (a valid value, an edge or invalid value of the right shape)
FIELDS = {
    "model": (st.just("kvpool-tiny"), st.sampled_from(["gpt-4o", "", "KVPOOL-TINY"])),
    "max_tokens": (st.integers(1, 8), st.integers(-2**40, 2**40)),
    "n": (st.integers(1, 3), st.integers(-5, 10**6)),
    "temperature": (st.floats(0.0, 2.0), st.floats(allow_nan=True, allow_infinity=True)),
    "top_p": (st.floats(1e-6, 1.0), st.floats(-1e300, 1e300)),  # vLLM: (0, 1]
    "top_k": (st.integers(-1, 600), st.integers(-2**70, 2**70)),
    "seed": (st.integers(-2**63, 2**64 - 1), st.integers(-2**70, 2**70)),
    "stop": (st.lists(st.text(min_size=1, max_size=3), max_size=3),
             st.lists(st.text(max_size=3), max_size=8)),
    "stream": (st.booleans(), st.sampled_from(["true", 1, 0])),
    "cache_salt": (st.text(min_size=1, max_size=8), st.text(max_size=2000)),
    "priority": (st.integers(-10, 10), st.integers(-2**40, 2**40)),
    "ignore_eos": (st.booleans(), st.integers(0, 1)),
    "stop_token_ids": (st.lists(st.integers(0, 511), max_size=3),
                       st.lists(st.integers(-2**40, 2**40), max_size=3)),
    "user": (st.text(max_size=8), st.integers()),
    "best_of": (st.just(1), st.integers(-2, 5)),
    "logit_bias": (st.just({}), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
    "zz_unknown_field": (junk, junk),
}
COMPLETION = {
    "prompt": (st.one_of(st.text(min_size=1, max_size=60),
                         st.lists(st.integers(0, 511), min_size=1, max_size=40)),
               st.one_of(st.text(max_size=300), st.lists(st.integers(-2, 2**33), max_size=40),
                         st.lists(st.text(max_size=5), min_size=1, max_size=3))),
    "echo": (st.just(False), st.booleans()),
    "logprobs": (st.just(0), st.integers(-1, 5)),
}
MESSAGE = st.fixed_dictionaries({
    "role": st.sampled_from(["system", "user", "assistant", "developer"]),
    "content": st.one_of(st.text(max_size=10), st.lists(st.fixed_dictionaries(
        {"type": st.just("text"), "text": st.text(max_size=5)}), max_size=2))})
CHAT = {
    "messages": (st.lists(MESSAGE, min_size=1, max_size=2),
                 st.one_of(st.lists(st.dictionaries(st.text(max_size=6), junk, max_size=3),
                                    max_size=3), st.text(max_size=5))),
    "max_completion_tokens": (st.integers(1, 8), st.integers(-2**40, 2**40)),
    "tools": (st.just([]), st.lists(st.just({"type": "function"}), max_size=1)),
}


@st.composite
def requests(draw) -> tuple[str, dict]:
    """A body that is valid in every field, then 0-2 fields made edgy, invalid or junk."""
    chat = draw(st.booleans())
    own = CHAT if chat else COMPLETION
    fields = {**FIELDS, **own}
    body = {}
    required = "messages" if chat else "prompt"
    for name, (valid, _) in fields.items():
        if name == required or draw(st.integers(0, 3)) == 0:  # optional fields: 1 in 4
            body[name] = draw(valid)
    if body.get("stream") is True and draw(st.booleans()):
        body["stream_options"] = {"include_usage": draw(st.booleans())}
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(sorted(fields) + ["stream_options"]))
        body[name] = draw(junk if name == "stream_options" or draw(st.booleans())
                          else fields[name][1])
    if draw(st.integers(0, 9)) == 0:
        body.pop(required, None)
    return ("/v1/chat/completions" if chat else "/v1/completions"), body


@pytest.fixture(scope="module")
def server():
    srv = InProcessServer(stress_config(**FUZZ_LIMITS), max_body_bytes=64 * 1024,
                          invariant_check_interval=1, shutdown_timeout=5.0)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def send(srv: InProcessServer, path: str, data: bytes) -> tuple[int, bytes, str]:
    host, port = srv.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read(), r.getheader("Content-Type", "")
    finally:
        conn.close()


def check_answer(status: int, raw: bytes, ctype: str) -> None:
    assert status < 500, (status, raw[:300])
    if ctype.startswith("text/event-stream"):
        assert raw.rstrip().endswith(b"data: [DONE]"), raw[-200:]
        assert b'"error"' not in raw, raw[-300:]
        return
    body = json.loads(raw)
    if status >= 400:
        assert set(body["error"]) == {"message", "type", "param", "code"}
    else:
        assert body["choices"] and "usage" in body


def _encode(body: dict) -> bytes:
    # NaN/inf floats go out as the non-JSON literals NaN/Infinity: the server must refuse them
    return json.dumps(body, allow_nan=True).encode()


@settings(max_examples=90, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(req=requests())
def test_schema_fuzz_never_5xx(server, req):
    path, body = req
    status, raw, ctype = send(server, path, _encode(body))
    check_answer(status, raw, ctype)
    assert server.engine.is_healthy()


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200),
                      st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_raw_bytes_fuzz_never_5xx(server, data):
    status, raw, ctype = send(server, "/v1/completions", data)
    check_answer(status, raw, ctype)


def test_no_leak_after_fuzzing(server):
    """Runs after the fuzz tests (file order): the pool is back to empty, invariants hold."""
    assert_clean(server.engine)
    assert not math.isnan(server.engine.num_free_blocks())
