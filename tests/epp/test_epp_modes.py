"""The picker's service over its real transport, driven by grpcio's client the way Envoy drives
it in each request body mode; a Picker whose only replica never answers, so every decision
is the 503 ImmediateResponse (a decision all the same: the call ends on it)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker
from kvpool.epp.service import DESTINATION_HEADER
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import LOOKUP_TIMEOUT

MODE = processing_mode_pb2.ProcessingMode
BODY = b'{"model": "m", "prompt": "hi"}'


def headers(mode: int, *extra: tuple[str, bytes]) -> pb.ProcessingRequest:
    hs = [base_pb2.HeaderValue(key=k, raw_value=v) for k, v in (
        (":method", b"POST"), (":path", b"/v1/completions"),
        ("content-type", b"application/json"), *extra)]
    return pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=hs)),
        protocol_config=pb.ProtocolConfiguration(request_body_mode=mode))


async def exchange(messages: list[pb.ProcessingRequest]) -> list[pb.ProcessingResponse]:
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT))
    async with picking(picker, "127.0.0.1", 0) as port, grpc.aio.insecure_channel(
            f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ExternalProcessorStub(channel).Process(iter(messages))
        return [m async for m in call]


async def test_buffered_body_followed_by_trailers_is_decided_on_the_body():
    """BUFFERED: Envoy sends the whole body in one message, end_of_stream false when trailers
    follow; that message is the whole body, so the picker decides on it, before any trailers.
    Written and read one message at a time, as Envoy does: once the decision ends the call
    there is nothing left to send (sending the trailers anyway raced the server's close and
    failed the call now and then in CI)."""
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT))
    async with picking(picker, "127.0.0.1", 0) as port, grpc.aio.insecure_channel(
            f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ExternalProcessorStub(channel).Process()
        await call.write(headers(MODE.BUFFERED))
        first = await call.read()
        await call.write(pb.ProcessingRequest(
            request_body=pb.HttpBody(body=BODY, end_of_stream=False)))
        # no trailers sent: the decision must not wait for them
        second = await asyncio.wait_for(call.read(), 10)
        await call.done_writing()
        assert await call.read() == grpc.aio.EOF
    kinds = [a.WhichOneof("response") for a in (first, second)]
    assert kinds == ["request_headers", "immediate_response"], kinds
    assert second.immediate_response.status.code == 503


async def test_full_duplex_body_ended_by_trailers_is_decided_on_the_trailers():
    answers = await exchange([
        headers(MODE.FULL_DUPLEX_STREAMED),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY[:9], end_of_stream=False)),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY[9:], end_of_stream=False)),
        pb.ProcessingRequest(request_trailers=pb.HttpTrailers())])
    kinds = [a.WhichOneof("response") for a in answers]
    assert kinds[0] == "immediate_response" and answers[0].immediate_response.status.code == 503


@pytest.mark.parametrize("mode", ["NONE", "STREAMED", "BUFFERED", "BUFFERED_PARTIAL", "GRPC"])
async def test_a_headers_continue_removes_the_clients_destination_header(mode):
    """A client's own x-gateway-destination-endpoint: the headers phase's CONTINUE (sent in
    every mode but full duplex) removes it, so where Envoy sends the headers on before the
    body (STREAMED, NONE) its ORIGINAL_DST cluster cannot connect where the client says."""
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT))
    async with picking(picker, "127.0.0.1", 0) as port, grpc.aio.insecure_channel(
            f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ExternalProcessorStub(channel).Process()
        await call.write(headers(getattr(MODE, mode), (DESTINATION_HEADER, b"10.9.9.9:80")))
        first = await asyncio.wait_for(call.read(), 10)
        await call.done_writing()
        assert await asyncio.wait_for(call.read(), 10) == grpc.aio.EOF
    mutation = first.request_headers.response.header_mutation
    assert list(mutation.remove_headers) == [DESTINATION_HEADER]
    assert not mutation.set_headers


async def test_full_duplex_answers_no_headers_phase_before_its_decision():
    """Full duplex: nothing goes back before the body's end; then the decision (a 503 here;
    a pick overwrites the header, NOTE(overwrite))."""
    answers = await exchange([
        headers(MODE.FULL_DUPLEX_STREAMED, (DESTINATION_HEADER, b"10.9.9.9:80")),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY, end_of_stream=True))])
    assert [a.WhichOneof("response") for a in answers] == ["immediate_response"]
