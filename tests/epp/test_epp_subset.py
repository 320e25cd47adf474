"""The proxy's subset hint (the GIE endpoint picker protocol, "Endpoint Subset"): with
``metadata_context.filter_metadata["envoy.lb.subset_hint"]
["x-gateway-destination-endpoint-subset"]`` set, the picker chooses only among the endpoints it
lists, and answers an ImmediateResponse 503 when none of them is usable (docs/epp.md, "The
subset hint"; kvpool/epp/subset.py). Before, the hint was ignored: the request went to the
replica the whole set's scoring chose, outside the subset.

Real aiohttp replicas on 127.0.0.1 (tests/router/test_router_hostile_replica.py
``fake_replica``): only ``hot`` reports a prefix hit, so without the hint the picker sends
every completion there; the picker is served over its real transport and driven by grpcio's
client as Envoy drives it in full duplex.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2

from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker, endpoint_of
from kvpool.epp.service import DESTINATION_HEADER, METADATA_NAMESPACE
from kvpool.epp.subset import (MAX_ELEMENTS, MAX_ENTRIES, SUBSET_KEY, SUBSET_NAMESPACE, Subset,
                               subset_hint)
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.router.test_router_hostile_replica import GOOD, fake_replica
from tests.router.test_router_responses_hostile import Fake, fakes

COLD = json.dumps({**GOOD, "device_hit_tokens": 0}).encode()
HOT = json.dumps(GOOD).encode()
BODY = json.dumps({"model": "m", "prompt": list(range(40)), "max_tokens": 1}).encode()
DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED


def request(path: str, hint: object, end: bool = False) -> pb.ProcessingRequest:
    hs = [base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in (
        (":method", "POST" if not end else "GET"), (":path", path))]
    req = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=hs),
                                       end_of_stream=end),
        protocol_config=pb.ProtocolConfiguration(request_body_mode=DUPLEX))
    if hint is not None:
        meta = struct_pb2.Struct()
        meta.update({SUBSET_KEY: hint})
        req.metadata_context.filter_metadata[SUBSET_NAMESPACE].CopyFrom(meta)
    return req


async def cold_and_hot(stack: contextlib.AsyncExitStack) -> tuple[str, str, int]:
    """Fake replicas ``cold`` and ``hot`` (only hot reports a prefix hit), in that order,
    behind a picker served on 127.0.0.1, all closed with ``stack``: (cold, hot, gRPC port)."""
    cold = await stack.enter_async_context(fake_replica("cold", COLD))
    hot = await stack.enter_async_context(fake_replica("hot", HOT))
    picker = Picker(Router(ReplicaSet([cold, hot], interval=3600),
                           lookup_timeout=LOOKUP_TIMEOUT))
    return cold, hot, await stack.enter_async_context(picking(picker, "127.0.0.1", 0))


async def decision(hint: object, path: str = "/v1/completions", again: bool = False
                   ) -> tuple[pb.ProcessingResponse, dict[str, str]]:
    """The first answer to one request carrying ``hint`` (None: no hint), with cold and hot
    replicas in that order; ``hint`` is a function of their endpoints. With ``again`` the
    body's message carries the hint too (Envoy forwards the namespace with every message)."""
    async with contextlib.AsyncExitStack() as stack:
        cold, hot, port = await cold_and_hot(stack)
        channel = await stack.enter_async_context(
            grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
        names = {"cold": endpoint_of(cold), "hot": endpoint_of(hot)}
        given = hint(names) if callable(hint) else hint
        messages = [request(path, given, end=path != "/v1/completions")]
        if path == "/v1/completions":
            messages.append(pb.ProcessingRequest(
                request_body=pb.HttpBody(body=BODY, end_of_stream=True)))
            if again:
                messages[-1].metadata_context.CopyFrom(messages[0].metadata_context)
        answers = [m async for m in pb_grpc.ExternalProcessorStub(channel).Process(
            iter(messages))]
        return answers[0], names


def destination(answer: pb.ProcessingResponse) -> str:
    header = answer.request_headers.response.header_mutation.set_headers[0].header
    meta = answer.dynamic_metadata.fields[METADATA_NAMESPACE].struct_value
    assert header.key == DESTINATION_HEADER
    assert meta.fields[DESTINATION_HEADER].string_value == header.raw_value.decode()
    return header.raw_value.decode()


async def test_without_a_hint_the_hot_replica_is_picked():
    answer, names = await decision(None)
    assert destination(answer) == names["hot"]


@pytest.mark.parametrize("hint", [
    lambda n: [n["cold"]],  # the protocol's list of ip:port
    lambda n: n["cold"],  # a flat string, as a header-to-metadata rule writes it
    lambda n: [f"{n['cold']}, 10.0.0.9:80"],  # comma-separated inside a list entry
    lambda n: [n["cold"], "not an endpoint", "[::1]:x"],
])
async def test_a_generation_request_is_picked_among_the_hint_only(hint):
    answer, names = await decision(hint)
    assert destination(answer) == names["cold"]


async def test_a_non_generation_request_keeps_to_the_hint_too():
    answer, names = await decision(lambda n: [n["hot"]], path="/v1/models")
    assert destination(answer) == names["hot"]


@pytest.mark.parametrize("hint", [[], "", ["10.0.0.9:80"], 7,
                                  lambda n: [n["hot"].replace("127.0.0.1", "127.0.0.2")],
                                  lambda n: [n["cold"]] * (MAX_ENTRIES + 1)])  # hint-cap
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/models"])
async def test_a_hint_naming_no_usable_replica_is_answered_503(hint, path):
    answer, _ = await decision(hint, path)
    immediate = answer.immediate_response
    assert immediate.status.code == 503, answer
    error = json.loads(immediate.body)["error"]
    # none names a replica the picker knows (kvpool/epp/refusals.py NOTE(no-endpoint))
    assert error["code"] == "subset_unknown" and "subset" in error["message"]


def test_entries_match_host_and_port_ipv6_included():
    hint = Subset(["[::0001]:8000", "10.0.0.1", "[fe80::2]", "fe80::3", "10.0.0.2:9"])
    assert hint.allows("http://[::1]:8000") and not hint.allows("http://[::1]:8001")
    assert hint.allows("http://10.0.0.1:1234") and hint.allows("http://[fe80::2]:80")
    assert hint.allows("https://[fe80::3]") and hint.allows("http://10.0.0.2:9")
    assert not hint.allows("http://10.0.0.2:90") and not hint.allows("http://10.0.0.3:9")


def test_an_entry_that_cannot_be_read_names_nothing_and_spoils_no_other():
    """A port of 4300+ digits made int() raise (Python's digit limit): the call failed
    INTERNAL, a traceback per call, the valid entries beside it lost."""
    hint = Subset(["127.0.0.1:" + "1" * 5000, "10.0.0.2:9", "[::1]:" + "9" * 6])
    assert hint.pairs == {("10.0.0.2", 9)}
    assert hint.allows("http://10.0.0.2:9") and not hint.allows("http://127.0.0.1:1111")


@pytest.mark.parametrize("path, body", [
    ("/v1/responses", json.dumps({"input": "more", "previous_response_id": "resp_1"})),
    ("/v1/responses/resp_1", ""),
])
async def test_a_follow_ups_search_asks_only_the_replicas_the_hint_names(path, body):
    """affinity.py NOTE(search-among): the replica outside the hint gets no GET at all, even
    when it holds the response (then the follow-up goes to a replica named, which says 404)."""
    outside, named = Fake(held={"resp_1"}), Fake()
    async with fakes(outside, named, Fake(held={"resp_1"})) as urls:
        picker = Picker(Router(ReplicaSet(urls, interval=3600)))
        await picker.start()
        try:
            hint = Subset([endpoint_of(urls[1]), endpoint_of(urls[2])])
            method = "POST" if body else "GET"
            for _ in range(2):  # the second is known from the first's search
                assert (await picker.pick_body(path, body.encode(), [], method, hint)).endpoint == \
                    endpoint_of(urls[2])
            only = Subset([endpoint_of(urls[1])])
            assert (await picker.pick_body(path, body.encode(), [], method, only)).endpoint == \
                endpoint_of(urls[1])
        finally:
            await picker.close()
    assert outside.gets == [] and named.gets == ["resp_1", "resp_1"], (outside, named)


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Every address the subset module reads (``ipaddress.ip_address``, once per entry)."""
    seen, real = [], ipaddress.ip_address
    monkeypatch.setattr(ipaddress, "ip_address", lambda a: seen.append(a) or real(a))
    return seen


def test_a_hint_past_the_cap_names_nothing_and_no_entry_of_it_is_read(reads):
    """NOTE(hint-cap): more than MAX_ENTRIES entries, as a list, one string or commas inside
    list entries, name nothing and none is read; MAX_ENTRIES are all read. Before, a hint of
    500,000 entries was read entry by entry on the event loop: every other call waited ~2.8 s."""
    entry = "10.0.0.1:80"
    for hint in ([entry] * (MAX_ENTRIES + 1), ",".join([entry] * (MAX_ENTRIES + 1)),
                 [f"{entry},{entry}"] * (MAX_ENTRIES // 2 + 1)):
        got = subset_hint(request("/v1/completions", hint))
        assert got is not None and not got.pairs
    assert reads == []
    at_cap = subset_hint(request("/v1/completions", [entry] * MAX_ENTRIES))
    assert at_cap is not None and at_cap.pairs == {("10.0.0.1", 80)}
    assert len(reads) == MAX_ENTRIES


def test_empty_entries_do_not_count_toward_the_cap(reads):
    """NOTE(hint-cap): MAX_ENTRIES endpoints with a trailing comma, a ``,,`` or `` , `` between
    two, in two strings each ending in a comma, or beside an empty list element: all of them
    are read and named. Past the cap by one named entry, empty ones or not, or past
    MAX_ELEMENTS list elements, nothing is read. Before, commas counted the empty entries:
    each hint below named nothing (a 503 per request) and the WARNING said 4097 entries."""
    named = [f"10.0.{i >> 8}.{i & 255}:80" for i in range(MAX_ENTRIES)]
    half = MAX_ENTRIES // 2
    for hint in (",".join(named) + ",", ",".join(named[:half]) + ",," + ",".join(named[half:]),
                 " , ".join(named) + " , ", [",".join(named[:half]) + ",",
                                             ",".join(named[half:]) + ","], [*named, ""]):
        got = subset_hint(request("/v1/completions", hint))
        assert got is not None and len(got.pairs) == MAX_ENTRIES, type(hint)
    assert len(reads) == 5 * MAX_ENTRIES
    for hint in (",".join([*named, "10.9.9.9:80"]) + ",,", [""] * (MAX_ELEMENTS + 1)):
        got = subset_hint(request("/v1/completions", hint))
        assert got is not None and not got.pairs
    assert len(reads) == 5 * MAX_ENTRIES


async def test_a_calls_hint_is_read_once_though_each_message_carries_it(reads):
    """The headers' message and the body's carry the same hint: its entries are read once
    (the first message's), and the pick keeps to it. Before, each message's hint was read
    again (a call of many body chunks read it once a chunk)."""
    answer, names = await decision(lambda n: [n["cold"], "10.9.9.9:80"], again=True)
    assert destination(answer) == names["cold"]
    assert reads.count("10.9.9.9") == 1, reads
