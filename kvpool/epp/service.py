"""The Envoy external-processing (ext_proc) stream of the Gateway API Inference Extension's
endpoint-picker protocol.

One gRPC ``Process`` stream per HTTP request. Envoy sends the request headers, then the body,
and skips the response, which streams straight from the replica to the client. The request
body mode (the first message's ``protocol_config``) sets how the picker answers::

    FULL_DUPLEX_STREAMED (deploy/envoy/envoy.yaml: the Inference Extension's mode)
        Envoy sends headers and body chunks without waiting; the picker answers nothing until
        the body's end, then the headers (with the decision) and the whole body back, in one
        go: one round trip per request (NOTE(duplex)). A body past --max-body-bytes ends it
        with an ImmediateResponse 413.
    BUFFERED (or any other)
        request_headers, more to come -> CONTINUE, removing the client's
        x-gateway-destination-endpoint (NOTE(overwrite)); the whole body once Envoy has it ->
        decided (BUFFERED sends it as one message, not marked as the end when trailers follow)

    request_headers, end of stream -> a request without a body: decided now, on the headers
    the body complete              -> decided:
        a JSON object         -> CONTINUE with the header x-gateway-destination-endpoint:
                                 host:port (overwriting any the client sent) and the same in
                                 dynamic metadata, namespace "envoy.lb"; the ORIGINAL_DST
                                 cluster connects there
        not a JSON object     -> ImmediateResponse 400, OpenAI error JSON (no replica asked;
                                 Anthropic's on a Messages path, as every answer here)
        no healthy replica    -> ImmediateResponse 503 + Retry-After, OpenAI error JSON
        (a subset hint in metadata_context, envoy.lb.subset_hint: chosen only among the
        healthy replicas it names, none of them -> the same 503; kvpool/epp/subset.py; one
        naming no replica the picker knows: code subset_unknown, refusals.py
        NOTE(no-endpoint))
        (each of these answers: the CORS headers of --allowed-origins, refusals.py
        NOTE(epp-cors); a generation path asked with another method than POST is no
        generation: picker.py NOTE(methods))
        (--model-rewrites: a body whose model a rule rewrites goes on with the new body and
        its content-length; rewrite.py NOTE(model-rewrite))
    after the decision, when the pick wants its answer (NOTE(answer-phase)) -> answers.py;
    anything else (a response phase a pick does not want) -> CONTINUE, unchanged

NOTE(duplex): in BUFFERED mode Envoy waits for the headers' answer before it sends the body
(two exchanges in turn); in full duplex nothing waits on the picker before the body's end, at
the price of the body going back to Envoy in the answer (the upstream gets what the answer
carries). On a loaded 2-core box, with the fixed-answer picker of bench.epp_breakdown and
only the mode switched: no difference on grpc.aio; on kvpool.epp.h2 full duplex added +0.94
ms p50 over a direct request against BUFFERED's +1.17 ms (5 repeats; docs/benchmarks.md).
Inference Extension gateways configure full duplex too. In full duplex the upstream request
is chunked: Envoy drops content-length in that mode whatever the answer sets (a small chunked
body cost a replica ~0.1 ms more on that box).

NOTE(early-end): the call ends OK as soon as the request is decided, without waiting for
Envoy to close its side: Envoy takes a processor's close as "nothing more to process" for the
rest of the request and its response, which is what the skipped response phases ask anyway.

NOTE(answer-phase): a pick that wants its answer keeps the call open past the decision: a
rewritten model to put back (NOTE(model-restore) in restore.py), ``--fallbacks`` to hold
against Envoy's retries (NOTE(retry-check) in retries.py), a pinned follow-up (picker.py
NOTE(pinned)), a Responses creation's id (picker.py NOTE(learn-answer)). Only when Envoy's
config sends the answers (the first message's
protocol_config: a response body mode other than NONE; deploy/envoy/ sends the headers and
the body STREAMED); otherwise the call ends at the decision as before and what is lost is
logged once. Such a call lets go of each message once answered (Stream.release), so it holds
no more than one message however long its answer, and ends as soon as nothing more is wanted.
Its client's leaving resets it (not counted as a rapid reset: NOTE(rapid-reset) in h2.py); at
a stop every such call is stopping and ends OK (``let_answers_go``) once no message of it is
queued or being answered (a restore on a worker thread) and it holds no bytes of its answer
(one that does ends at its next body message, with them), Envoy sending the rest of those
answers on unprocessed. The bytes it holds count against --max-held-bytes (NOTE(answer-budget)
in listener.py). Picks that
want nothing (no rewrite, no --fallbacks, no pinned follow-up, no POST /v1/responses) end
early.

NOTE(garbage): a message that is no ProcessingRequest ends its call INVALID_ARGUMENT and is
logged as one WARNING a minute at most (the count of such calls since the last), no traceback:
anyone who reaches the port could otherwise write a traceback to the log per call.

NOTE(overwrite): the destination header is set with OVERWRITE_IF_EXISTS_OR_ADD, so a client
cannot choose its own upstream by sending the header itself; and a headers-phase CONTINUE that
carries no decision removes it, since in modes where Envoy sends the headers on before the body
(STREAMED, NONE) the ORIGINAL_DST cluster would otherwise connect where the client's header
says (such a request then has no destination: Envoy fails it). The dynamic metadata form
(envoy.lb) is only ever set by a filter, never from a request.
"""

from __future__ import annotations

import functools
import logging

from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError

from kvpool.epp.answers import Answer, Wanted
from kvpool.epp.calls import ENVELOPE, INVALID_ARGUMENT, Stream
from kvpool.epp.picker import Pick, Picker
from kvpool.epp.refusals import NoEndpoint, cors_headers, header, refused
from kvpool.epp.subset import Subset, subset_hint
from kvpool.errors import RequestError
from kvpool.router.affinity import HolderDown
from kvpool.router.upstream import SAFE_METHODS
from kvpool.throttle import Throttle

__all__ = ["DESTINATION_HEADER", "METADATA_NAMESPACE", "EndpointPicker"]

log = logging.getLogger("kvpool.epp")
DESTINATION_HEADER = "x-gateway-destination-endpoint"
METADATA_NAMESPACE = "envoy.lb"
FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = processing_mode_pb2.ProcessingMode.BUFFERED
NO_BODY_MODE = processing_mode_pb2.ProcessingMode.NONE  # no protocol_config (yet)
GARBAGE_LOG_INTERVAL = 60.0  # seconds between two warnings of undecodable messages
DUPLEX_UNCHECKED = (
    "kvpool epp: --fallbacks: this route sends the answers FULL_DUPLEX_STREAMED, which the "
    "picker does not take through itself for the check alone, so Envoy's retries are not "
    "checked against the list and kvpool_epp_failovers_total stays 0; set "
    "response_body_mode: STREAMED on the route (docs/epp.md, \"Fallback endpoints\")")


# NOTE(shared): the answers that depend only on their arguments are built once and shared by
# every stream (the transport only serializes them; nothing here mutates an answer)
@functools.lru_cache(maxsize=4096)
def routed(endpoint: str, phase: str, plain: bool = False) -> pb.ProcessingResponse:
    """CONTINUE the ``phase`` ("request_headers" / "request_body") towards ``endpoint``;
    ``plain``: asking for the answer uncompressed (``accept-encoding: identity``), as a
    Responses creation whose id the picker reads is (picker.py NOTE(learn-answer)), and a
    stored response whose model it puts back (stored_names.py NOTE(stored-names))."""
    headers = [header(DESTINATION_HEADER, endpoint)]
    if plain:
        headers.append(header("accept-encoding", "identity"))
    common = pb.CommonResponse(header_mutation=pb.HeaderMutation(set_headers=headers))
    meta = struct_pb2.Struct()
    meta.update({METADATA_NAMESPACE: {DESTINATION_HEADER: endpoint}})
    out = pb.ProcessingResponse(dynamic_metadata=meta)
    getattr(out, phase).CopyFrom(
        pb.HeadersResponse(response=common) if phase == "request_headers"
        else pb.BodyResponse(response=common))
    return out


def rewritten(endpoint: str, phase: str, body: bytes) -> pb.ProcessingResponse:
    """``routed`` for a body whose model was rewritten (NOTE(model-rewrite) in rewrite.py):
    its new ``content-length`` with the destination, and in the body phase (BUFFERED) the body
    itself; full duplex sends it with ``body_back``. The answer is asked for uncompressed, so
    its model can be put back (NOTE(model-restore) in restore.py)."""
    out = pb.ProcessingResponse()
    out.CopyFrom(routed(endpoint, phase, True))
    common = getattr(out, phase).response
    common.header_mutation.set_headers.append(header("content-length", str(len(body))))
    if phase == "request_body":
        common.body_mutation.body = body
    return out


@functools.lru_cache(maxsize=None)
def _passed(phase: str) -> pb.ProcessingResponse:
    out = pb.ProcessingResponse()
    kind = pb.HeadersResponse if phase.endswith("headers") else (
        pb.BodyResponse if phase.endswith("body") else pb.TrailersResponse)
    getattr(out, phase).CopyFrom(kind())
    return out


@functools.lru_cache(maxsize=None)
def _headers_passed() -> pb.ProcessingResponse:
    """CONTINUE the request headers without the client's destination (NOTE(overwrite))."""
    return pb.ProcessingResponse(request_headers=pb.HeadersResponse(response=pb.CommonResponse(
        header_mutation=pb.HeaderMutation(remove_headers=[DESTINATION_HEADER]))))


def body_back(raw: bytes, end: bool) -> pb.ProcessingResponse:
    """A full-duplex body answer: ``raw`` is what the upstream gets (all of it, at once)."""
    return pb.ProcessingResponse(request_body=pb.BodyResponse(response=pb.CommonResponse(
        body_mutation=pb.BodyMutation(streamed_response=pb.StreamedBodyResponse(
            body=raw, end_of_stream=end)))))


class _Stream:
    """What one stream has sent so far."""

    __slots__ = ("headers", "chunks", "size", "mode", "answer_mode", "subset", "answer")

    def __init__(self) -> None:
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []
        self.size = 0
        self.mode = NO_BODY_MODE  # the request body mode, once protocol_config says it
        self.answer_mode = NO_BODY_MODE  # the response body mode, the same way
        self.subset: Subset | None = None  # the proxy's subset hint, once a message has one
        self.answer: Answer | None = None  # the answer phase, once decided (NOTE(answer-phase))

    @property
    def path(self) -> str:
        """The request's ``:path`` (query string included), once its headers came."""
        return next((v for k, v in self.headers if k == ":path"), "/")


class EndpointPicker:
    """The ext_proc service: one decision per stream (module docstring)."""

    def __init__(self, picker: Picker) -> None:
        self.picker = picker
        self.max_body_bytes = picker.router.max_body_bytes  # full duplex: the picker buffers
        self.garbage = 0  # undecodable messages since the last warning (NOTE(garbage))
        self._garbage_log = Throttle(GARBAGE_LOG_INTERVAL)
        self.no_endpoint = NoEndpoint(picker)  # refusals.py NOTE(no-endpoint)
        self.answering: dict[Stream, Answer] = {}  # calls past their decision (NOTE(answer-phase))
        self.unseen: set[str] = set()  # what answers skipped by Envoy's config hid (said once)

    async def process(self, call: Stream) -> None:
        """One ``Process`` call (kvpool.epp.calls): each message answered as it comes; the call
        ends OK once the request is decided (NOTE(early-end)) or, when its pick wants the
        answer, once that is done with (NOTE(answer-phase)), or when Envoy ends it."""
        stream = _Stream()
        try:
            while (raw := await call.messages.get()) is not None:
                try:
                    req = pb.ProcessingRequest.FromString(raw)
                except DecodeError:
                    self.undecodable()
                    return await call.send([], True, INVALID_ARGUMENT, "not a ProcessingRequest")
                if stream.answer is None:
                    answers, done = await self.step(stream, req)
                    if done and stream.answer is not None:  # the request's bytes are let go
                        self.answering[call] = stream.answer
                        stream.answer.call = call  # its held bytes count on it
                        call.release(call.held)
                        done = False
                else:
                    answers, done = await self.answered(stream.answer, req, call)
                    call.release(len(raw) + ENVELOPE)
                if answers or done:
                    await call.send([a.SerializeToString() for a in answers], done)
                if done:
                    return
            await call.send([], True)
        finally:
            self.answering.pop(call, None)

    async def answered(self, answer: Answer, req: pb.ProcessingRequest, call: Stream
                       ) -> tuple[list[pb.ProcessingResponse], bool]:
        """A message after the decision: the answer's phases, anything else passed; a
        stopping call is done once nothing is held, queued or in progress (let_answers_go)."""
        phase = req.WhichOneof("request")
        answer.busy = True
        try:
            if phase is not None and phase.startswith("response_"):
                out, done = await answer.step(req)
            else:
                out, done = ([] if phase is None else [_passed(phase)]), False
        finally:
            answer.busy = False
        return out, done or answer.stopping and not answer.holding and call.messages.empty()

    def let_answers_go(self) -> None:
        """At a stop: every call in its answer phase is stopping and ends OK once it has
        answered what came and holds nothing, so Envoy sends the rest of those answers on
        unprocessed, none cut (NOTE(answer-phase)): one answering a message, or with one
        queued, when that is answered; one holding bytes of its answer at its next body
        message, which takes them along; one idle now."""
        for call, answer in self.answering.items():
            answer.stopping = True
            if not (answer.busy or answer.holding or call.messages.qsize()):
                call.messages.put_nowait(None)

    def undecodable(self) -> None:
        """Count a message that is no ProcessingRequest; warn at most once an interval."""
        self.garbage += 1
        if self._garbage_log.due():
            log.warning("kvpool epp: %d call(s) sent a message that is no ProcessingRequest "
                        "(ended INVALID_ARGUMENT)", self.garbage)
            self.garbage = 0

    async def step(self, stream: _Stream, req: pb.ProcessingRequest
                   ) -> tuple[list[pb.ProcessingResponse], bool]:
        """The answers to one message, and whether the request is decided (the module
        docstring's table)."""
        phase = req.WhichOneof("request")
        if req.HasField("protocol_config"):
            stream.mode = req.protocol_config.request_body_mode
            stream.answer_mode = req.protocol_config.response_body_mode
        if stream.subset is None and (hint := subset_hint(req)) is not None:  # NOTE(hint-cap)
            stream.subset = hint
        if phase == "request_headers":
            stream.headers = [(h.key, h.raw_value.decode("utf-8", "replace") or h.value)
                              for h in req.request_headers.headers.headers]
            if req.request_headers.end_of_stream:
                return [(await self.decide(stream, b"", "request_headers"))[0]], True
            return ([] if stream.mode == FULL_DUPLEX else [_headers_passed()]), False
        if phase == "request_body":
            stream.chunks.append(req.request_body.body)
            stream.size += len(req.request_body.body)
            if stream.size > self.max_body_bytes:
                return [await self.refuse(413, f"request body over {self.max_body_bytes} bytes",
                                          "request_too_large", stream=stream)], True
            # BUFFERED: one message is the whole body (end_of_stream false when trailers follow)
            if req.request_body.end_of_stream or stream.mode == BUFFERED:
                return await self.answer(stream, True), True
            return ([] if stream.mode == FULL_DUPLEX else [_passed(phase)]), False
        # full duplex: trailers end a body that came without its end flag
        if phase == "request_trailers" and stream.mode == FULL_DUPLEX:
            return [*await self.answer(stream, False), _passed(phase)], True
        return ([] if phase is None else [_passed(phase)]), False

    async def answer(self, stream: _Stream, end: bool) -> list[pb.ProcessingResponse]:
        """The answers to a complete body: its decision, and in full duplex the body back."""
        raw = b"".join(stream.chunks)
        if stream.mode != FULL_DUPLEX:
            return [(await self.decide(stream, raw, "request_body"))[0]]
        self.picker.full_duplex += 1
        out, sent = await self.decide(stream, raw, "request_headers")
        return [out] if out.HasField("immediate_response") else [out, body_back(sent, end)]

    async def decide(self, stream: _Stream, raw: bytes, phase: str
                     ) -> tuple[pb.ProcessingResponse, bytes]:
        """The answer for ``phase``, and the body the replica is to get (``raw`` unless its
        model was rewritten: NOTE(model-rewrite) in rewrite.py)."""
        headers, path = stream.headers, stream.path
        method = next((v for k, v in headers if k == ":method"), "GET")
        plain = [(k, v) for k, v in headers if not k.startswith(":")]
        try:
            pick = await self.picker.pick_body(path, raw, plain, method, stream.subset)
        except RequestError as exc:
            return await self.refuse(400, str(exc), exc.code or "invalid_json", exc.param,
                                     stream), raw
        except HolderDown as exc:  # kvpool/router/affinity.py NOTE(holder-down)
            return await self.refuse(exc.status, exc.message, exc.code, exc.param, stream), raw
        if pick.endpoint is None:  # the protocol's 503, by why (refusals.py NOTE(no-endpoint))
            code, message = self.no_endpoint.why(stream.subset)
            return await self.refuse(503, message, code, stream=stream), raw
        stream.answer = answer = self.follow(stream, pick, method)
        if pick.body is raw:  # an answer read for its id or its model is asked uncompressed
            return routed(pick.endpoint, phase, answer is not None and (
                answer.wanted.learn is not None or answer.wanted.renamed is not None)), raw
        return rewritten(pick.endpoint, phase, pick.body), pick.body

    def follow(self, stream: _Stream, pick: Pick, method: str) -> Answer | None:
        """The answer phase ``pick`` wants, None when it wants none or Envoy's config sends
        no answers (said once: NOTE(answer-phase))."""
        renamed = pick.renamed
        retries = self.picker.retries
        check = retries if retries is not None and retries.wanted else None
        if stream.answer_mode == FULL_DUPLEX:  # every byte of it through the picker: not for
            if check is not None:  # a check alone (docs/epp.md, "Answers the picker reads")
                self.duplex_once()
            check = None
        # a creation's id is read in STREAMED answers only (picker.py NOTE(learn-answer))
        learn = pick.learn if stream.answer_mode not in (FULL_DUPLEX, NO_BODY_MODE) else None
        if renamed is None and check is None and pick.pinned is None and learn is None:
            return None
        if stream.answer_mode == NO_BODY_MODE:
            self.unseen_once(renamed is not None, check is not None)
            return None
        wanted = Wanted(renamed, pick.pinned, pick.param, learn, method in SAFE_METHODS)
        return Answer(wanted, stream.answer_mode, check, self.max_body_bytes,
                      functools.partial(self.refuse, stream=stream))

    def duplex_once(self) -> None:
        """Say once that --fallbacks is neither checked nor its failovers counted on a route
        sending answers in full duplex (retries.py NOTE(failovers))."""
        if DUPLEX_UNCHECKED not in self.unseen:
            self.unseen.add(DUPLEX_UNCHECKED)
            log.warning(DUPLEX_UNCHECKED)

    def unseen_once(self, renamed: bool, checked: bool) -> None:
        """Say once what answers Envoy does not send the picker cost (NOTE(answer-phase))."""
        for what, why in ((renamed, "--model-rewrites' answers keep the target model"),
                          (checked, "--fallbacks cannot be checked against Envoy's retries")):
            if what and why not in self.unseen:
                self.unseen.add(why)
                log.warning("kvpool epp: %s: Envoy's ext_proc filter sends the picker no "
                            "answers (response_body_mode NONE); on the route, set "
                            "response_header_mode: SEND and response_body_mode: STREAMED (the "
                            "typed_per_filter_config of deploy/envoy/envoy.yaml; docs/epp.md, "
                            '"Answers the picker reads")', why)

    async def refuse(self, status: int, message: str, code: str, param: str | None = None,
                     stream: _Stream | None = None) -> pb.ProcessingResponse:
        """The picker's own error answer to ``stream``'s request, with the CORS headers its
        router's policy gives it (refusals.py NOTE(epp-cors)), counted by ``status``
        (Picker.errors)."""
        self.picker.errors[status] += 1
        headers = [] if stream is None else stream.headers
        return refused(status, message, code, param, "/" if stream is None else stream.path,
                       await cors_headers(self.picker.router.cors, headers))
