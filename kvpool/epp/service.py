"""The Envoy external-processing (ext_proc) stream of the Gateway API Inference Extension's
endpoint-picker protocol.

One gRPC ``Process`` stream per HTTP request. Envoy is configured (deploy/envoy/envoy.yaml)
to send the request headers, then the whole body (``request_body_mode: BUFFERED``), and to
skip the response, which streams straight from the replica to the client::

    request_headers, more to come  -> CONTINUE (the headers are kept for the decision)
    request_headers, end of stream -> a request without a body: decided now, on the headers
    request_body chunks            -> kept until end_of_stream, then decided:
        a JSON object         -> CONTINUE with the header x-gateway-destination-endpoint:
                                 host:port (overwriting any the client sent) and the same in
                                 dynamic metadata, namespace "envoy.lb"; the ORIGINAL_DST
                                 cluster connects there
        not a JSON object     -> ImmediateResponse 400, OpenAI error JSON (no replica asked)
        no healthy replica    -> ImmediateResponse 503 + Retry-After, OpenAI error JSON
    anything else (a response phase if a config sends it) -> CONTINUE, unchanged

NOTE(overwrite): the destination header is set with OVERWRITE_IF_EXISTS_OR_ADD, so a client
cannot choose its own upstream by sending the header itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from kvpool.epp.picker import Picker
from kvpool.errors import RequestError
from kvpool.router.proxy import RETRY_AFTER_SECONDS
from kvpool.server.middleware import error_body, error_type

__all__ = ["DESTINATION_HEADER", "METADATA_NAMESPACE", "EndpointPicker"]

log = logging.getLogger("kvpool.epp")
DESTINATION_HEADER = "x-gateway-destination-endpoint"
METADATA_NAMESPACE = "envoy.lb"
_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def _header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode()), append_action=_OVERWRITE)


def routed(endpoint: str, phase: str) -> pb.ProcessingResponse:
    """CONTINUE the ``phase`` ("request_headers" / "request_body") towards ``endpoint``."""
    common = pb.CommonResponse(header_mutation=pb.HeaderMutation(
        set_headers=[_header(DESTINATION_HEADER, endpoint)]))
    meta = struct_pb2.Struct()
    meta.update({METADATA_NAMESPACE: {DESTINATION_HEADER: endpoint}})
    out = pb.ProcessingResponse(dynamic_metadata=meta)
    getattr(out, phase).CopyFrom(
        pb.HeadersResponse(response=common) if phase == "request_headers"
        else pb.BodyResponse(response=common))
    return out


def refused(status: int, message: str, code: str, param: str | None = None) -> \
        pb.ProcessingResponse:
    """An ImmediateResponse with OpenAI error JSON: Envoy answers the client, no upstream."""
    headers = [_header("content-type", "application/json")]
    if status == 503:
        headers.append(_header("retry-after", RETRY_AFTER_SECONDS))
    body = json.dumps(error_body(message, error_type(status), param, code)).encode()
    return pb.ProcessingResponse(immediate_response=pb.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=status),
        headers=pb.HeaderMutation(set_headers=headers), body=body,
        details=f"kvpool_epp_{code}"))


def _passed(phase: str) -> pb.ProcessingResponse:
    out = pb.ProcessingResponse()
    kind = pb.HeadersResponse if phase.endswith("headers") else (
        pb.BodyResponse if phase.endswith("body") else pb.TrailersResponse)
    getattr(out, phase).CopyFrom(kind())
    return out


class EndpointPicker(pb_grpc.ExternalProcessorServicer):
    """The ext_proc service: one decision per stream (module docstring)."""

    def __init__(self, picker: Picker) -> None:
        self.picker = picker

    async def Process(self, request_iterator: AsyncIterator[pb.ProcessingRequest],
                      context) -> AsyncIterator[pb.ProcessingResponse]:  # noqa: N802 - gRPC name
        headers: list[tuple[str, str]] = []
        chunks: list[bytes] = []
        async for req in request_iterator:
            phase = req.WhichOneof("request")
            if phase == "request_headers":
                headers = [(h.key, h.raw_value.decode("utf-8", "replace") or h.value)
                           for h in req.request_headers.headers.headers]
                if req.request_headers.end_of_stream:
                    yield await self.decide(headers, b"", "request_headers")
                else:
                    yield _passed(phase)
            elif phase == "request_body":
                chunks.append(req.request_body.body)
                if req.request_body.end_of_stream:
                    yield await self.decide(headers, b"".join(chunks), "request_body")
                else:
                    yield _passed(phase)
            elif phase is not None:
                yield _passed(phase)

    async def decide(self, headers: list[tuple[str, str]], raw: bytes,
                     phase: str) -> pb.ProcessingResponse:
        path = next((v for k, v in headers if k == ":path"), "/")
        plain = [(k, v) for k, v in headers if not k.startswith(":")]
        try:
            endpoint = await self.picker.pick(path, raw, plain)
        except RequestError as exc:
            return refused(400, str(exc), exc.code or "invalid_json", exc.param)
        if endpoint is None:
            return refused(503, "no healthy replica", "no_replica")
        return routed(endpoint, phase)
