"""The model-name rewrite and traffic split (``kvpool epp --model-rewrites``; the Inference
Extension's InferenceModelRewrite; docs/epp.md, "Model rewrite and traffic splitting";
kvpool/epp/rewrite.py NOTE(model-rewrite)) through a real Envoy (bench/envoy_proc.py) with the
shipped deploy/envoy/envoy.yaml (full duplex) and a BUFFERED variant, in front of a real aiohttp
replica on 127.0.0.1 that records the model of each prefix lookup and completion, and the
completion's framing. Before, the body went upstream unchanged: the replica saw the client's
model. Envoy is started and stopped by pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import subprocess
import sys
import zlib
from collections import Counter

import aiohttp
import pytest
from aiohttp import web

from bench.envoy_proc import Envoy
from kvpool.epp import cli
from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker
from kvpool.epp.rewrite import parse_rewrites
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from stress.http.servers import ROOT
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served
from tests.router.test_router_hostile_replica import GOOD, OK_HEALTH

BUFFERED = ("                request_body_mode: FULL_DUPLEX_STREAMED\n",
            "                request_body_mode: BUFFERED\n")


def rules(*weights: int) -> dict:
    targets = [{"modelRewrite": f"food-review-v{i + 1}", "weight": w}
               for i, w in enumerate(weights)]
    return {"kind": "InferenceModelRewrite", "spec": {"rules": [
        {"matches": [{"model": {"type": "Exact", "value": "food-review"}}],
         "targets": targets}]}}


@contextlib.asynccontextmanager
async def replica():
    """Yields (base URL, what it saw: "lookup" models, "served" (model, raw body, headers))."""
    seen: dict[str, list] = {"lookup": [], "served": []}

    async def lookup(request):
        seen["lookup"].append(json.loads(await request.read()).get("model"))
        return web.json_response(GOOD)

    async def complete(request):
        raw = await request.read()
        body = json.loads(raw)  # valid JSON, or the test fails here
        seen["served"].append((body["model"], raw, request.headers.copy()))
        if not body.get("stream"):
            return web.json_response({"object": "text_completion", "model": body["model"]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for text in ("a", "b"):
            chunk = {"model": body["model"], "choices": [{"text": text}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/kvpool/lookup", lookup)
    app.router.add_post("/v1/completions", complete)
    async with apps_served(app) as (url,):
        yield url, seen


@contextlib.asynccontextmanager
async def gateway(workdir, doc: dict, edits=()):
    """The replica, the picker with ``doc``'s rules and Envoy; yields (Envoy URL, seen)."""
    async with contextlib.AsyncExitStack() as stack:
        url, seen = await stack.enter_async_context(replica())
        picker = Picker(Router(ReplicaSet([url], interval=3600), lookup_timeout=LOOKUP_TIMEOUT),
                        parse_rewrites(doc))
        port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
        envoy = Envoy(port, workdir, edits)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield envoy.url, seen


async def ask(s: aiohttp.ClientSession, url: str, body: dict, **headers) -> tuple[int, bytes]:
    async with s.post(url + "/v1/completions", json=body, headers=headers,
                      timeout=aiohttp.ClientTimeout(total=20)) as r:
        return r.status, await r.read()


@pytest.mark.parametrize("edits", [(), (BUFFERED,)], ids=["full_duplex", "buffered"])
async def test_the_replica_and_the_lookup_see_the_target_model(tmp_path, edits):
    body = {"model": "food-review", "prompt": "é" + "x" * 300, "max_tokens": 1}
    async with gateway(tmp_path, rules(0, 100), edits) as (url, seen), \
            aiohttp.ClientSession() as s:
        for stream in (False, True):
            status, out = await ask(s, url, {**body, "stream": stream})
            assert status == 200, out
            # the answer names the model asked for (test_epp_model_restore.py)
            assert b'"food-review"' in out and b"food-review-v" not in out
        status, _ = await ask(s, url, {**body, "model": "other"})  # no rule: untouched
        assert status == 200
    assert seen["lookup"] == ["food-review-v2", "food-review-v2", "other"]
    assert [m for m, _, _ in seen["served"]] == ["food-review-v2", "food-review-v2", "other"]
    sent = [{**body, "stream": False}, {**body, "stream": True}, {**body, "model": "other"}]
    for (model, raw, headers), asked in zip(seen["served"], sent):
        assert json.loads(raw) == {**asked, "model": model}  # the rest as the client sent it
        if edits:  # BUFFERED: the length the picker set; full duplex relays it chunked
            assert int(headers["Content-Length"]) == len(raw), headers
        else:
            assert headers["Transfer-Encoding"] == "chunked" and "Content-Length" not in headers
    assert seen["served"][2][1] == json.dumps(sent[2]).encode()  # byte for byte


async def test_a_split_sends_both_targets_and_a_request_id_always_one(tmp_path):
    body = {"model": "food-review", "prompt": "hello", "max_tokens": 1}
    async with gateway(tmp_path, rules(50, 50)) as (url, seen), aiohttp.ClientSession() as s:
        for i in range(24):
            assert (await ask(s, url, body, **{"x-request-id": f"req-{i}"}))[0] == 200
        split = Counter(m for m, _, _ in seen["served"])
        assert set(split) == {"food-review-v1", "food-review-v2"}, split
        seen["served"].clear()
        for _ in range(6):
            assert (await ask(s, url, body, **{"x-request-id": "same"}))[0] == 200
        assert len({m for m, _, _ in seen["served"]}) == 1, seen["served"]
        assert {h["X-Request-Id"] for _, _, h in seen["served"]} == {"same"}  # Envoy keeps it


def test_the_draw_follows_the_weights():
    table = parse_rewrites(rules(1, 3))
    got = Counter(table.target("food-review", f"id-{i}") for i in range(4000))
    assert 800 < got["food-review-v1"] < 1200 and got.total() == 4000, got
    assert table.target("other", "id") is None
    generic = parse_rewrites({"rules": [{"targets": [{"modelRewrite": "any"}]},
                                        {"matches": [{"model": {"value": "a"}}],
                                         "targets": [{"modelRewrite": "exact"}]}]})
    assert (generic.target("a", None), generic.target("b", None)) == ("exact", "any")


@pytest.mark.parametrize("text, message", [
    ("rules: [", "not YAML or JSON"),
    ("{}", "rules: a non-empty list"),
    ('{"rules": [{"matches": [{"model": {"value": "a"}}], "split": []}]}',
     "rules[0]: unknown key(s) split"),
    ('{"rules": [{"targets": [{"modelRewrite": "a", "weight": 1}, {"modelRewrite": "b"}]}]}',
     "rules[0]: set weight on every target or on none"),
    ('{"rules": [{"targets": [{"modelRewrite": "a", "weight": 0}]}]}', "weights are all 0"),
    ('{"rules": [{"targets": [{"modelRewrite": "a", "weight": -1}]}]}',
     "rules[0].targets[0]: weight must be an integer from 0 to 1000000"),
    ('{"rules": [{"targets": [{"modelRewrite": ""}]}]}', "modelRewrite must be a non-empty"),
    ('{"rules": [{"matches": [{"model": {"type": "Prefix", "value": "a"}}], '
     '"targets": [{"modelRewrite": "b"}]}]}', "model.type must be Exact"),
])
def test_a_malformed_file_fails_at_start_with_2(tmp_path, capsys, text, message):
    path = tmp_path / "rewrites.yaml"
    path.write_text(text)
    assert cli.main(["--replica", "http://127.0.0.1:9", "--model-rewrites", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvpool epp: --model-rewrites {path}: ") and message in err, err


def test_the_command_exits_2_on_a_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    done = subprocess.run([sys.executable, "-m", "kvpool", "epp", "--replica",
                           "http://127.0.0.1:9", "--model-rewrites", str(missing)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"--model-rewrites {missing}" in done.stderr, done.stderr


async def test_a_compressed_body_is_read_rewritten_and_compressed_again(tmp_path):
    """NOTE(encoded-body) in kvpool/epp/encoded.py: a gzip body was the picker's 400 "not
    valid UTF-8", where the replicas and kvpool router serve it. Now it is decoded to be read
    and scored, its model rewritten, and compressed again for the replica."""
    body = {"model": "food-review", "prompt": "x" * 300, "max_tokens": 1}
    async with gateway(tmp_path, rules(0, 100)) as (url, seen), aiohttp.ClientSession() as s:
        for model, coding, pack in (("food-review", "gzip", gzip.compress),
                                    ("other", "gzip", gzip.compress),
                                    ("food-review", "deflate", zlib.compress)):
            raw = pack(json.dumps({**body, "model": model}).encode())
            async with s.post(url + "/v1/completions", data=raw, headers={
                    "Content-Type": "application/json", "Content-Encoding": coding},
                    timeout=aiohttp.ClientTimeout(total=20)) as r:
                assert r.status == 200, await r.read()
            want = "food-review-v2" if model == "food-review" else model
            assert seen["served"][-1][0] == want and seen["lookup"][-1] == want
        status, out = await ask(s, url, body)  # and a plain one as before
        assert status == 200 and seen["served"][-1][0] == "food-review-v2"


async def test_a_large_body_with_a_lone_surrogate_goes_on_unrewritten(tmp_path):
    """NOTE(rewrite-surrogate) in picker.py: a body too large to check (its surrogate escape
    unseen by the check) decodes, but its rewrite cannot be encoded as UTF-8. That crashed the
    call: Envoy's 503 picker_unavailable with Retry-After, for a request that can never
    succeed, and a traceback per call. Now it goes upstream as it came: the replica judges it
    (a kvpool replica's 400)."""
    raw = json.dumps({"model": "food-review", "prompt": [1] * 70_000, "x": "\ud800"}).encode()
    async with gateway(tmp_path, rules(0, 100)) as (url, seen), aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/completions", data=raw,
                          headers={"Content-Type": "application/json"},
                          timeout=aiohttp.ClientTimeout(total=30)) as r:
            assert r.status == 200, await r.read()  # this replica takes it
        assert seen["served"][-1][0] == "food-review"  # as it came
