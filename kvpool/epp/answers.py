"""The answer phase of a call: what the picker does with the answer to a request it picked
for, when it asked to see it (service.py NOTE(answer-phase); docs/epp.md).

Per answer, by what its pick wants::

    a rewritten model (NOTE(model-restore))   the answer's model put back, headers without
                                              content-length, the body chunk by chunk
    --fallbacks N (NOTE(retry-check))         the headers' attempt count held against N
    a pinned follow-up (picker.py NOTE(pinned)) Envoy's own failure to reach the holder
                                              becomes the router's HolderDown (503
                                              response_unavailable); a POST the holder took
                                              and dropped, the router's 502 replica_failed;
                                              Envoy's timeout (a silent holder): a GET the
                                              503, a POST the 504 replica_unresponsive
    a Responses creation (NOTE(learn-answer))   a 200's response id, from its first bytes
                                              (answer_ids.py), learnt with its replica
    nothing more                              the call ends at the headers' answer

Envoy's response body modes: STREAMED (and BUFFERED) answer each body message with its bytes
as a body mutation and let the call end as soon as nothing more is wanted (Envoy sends the
rest on itself); FULL_DUPLEX_STREAMED has every byte go back through the picker to the end
(a call ended sooner loses the chunks Envoy sent it), so deploy/envoy/ configs use STREAMED.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from kvpool.epp.answer_ids import AnswerIds
from kvpool.epp.calls import Stream
from kvpool.epp.restore import JSON, SSE, ModelRestore
from kvpool.epp.retries import RetryCheck, envoys_failure, not_started, timed_out
from kvpool.router.affinity import HolderDown
from kvpool.router.relayed import INLINE_BYTES
from kvpool.router.upstream import replica_failed, replica_unresponsive
from kvpool.server.middleware import APIError

__all__ = ["Answer", "Wanted", "kind_of"]

log = logging.getLogger("kvpool.epp")
# a test's seam (tests/epp/test_epp_answer_bounds.py): awaited before a worker-thread restore
worker_gate: Callable[[], Awaitable[None]] | None = None

FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
_PASSED = pb.ProcessingResponse(response_headers=pb.HeadersResponse())
_UNSIZED = pb.ProcessingResponse(response_headers=pb.HeadersResponse(response=pb.CommonResponse(
    header_mutation=pb.HeaderMutation(remove_headers=["content-length"]))))
# the picker's own error answer (service.py EndpointPicker.refuse): status, message, code, param
Refuse = Callable[[int, str, str, "str | None"], Awaitable[pb.ProcessingResponse]]


class Wanted(NamedTuple):
    """What a pick wants of its answer (None / 0: not that)."""

    renamed: tuple[str, str] | None  # (the client's model, the target): NOTE(model-restore)
    pinned: str | None  # the response id of a pinned follow-up (picker.py NOTE(pinned))
    param: str | None  # the field that named it (previous_response_id; None: the path)
    # a creation's: learns (response id, the attempt count) (picker.py NOTE(learn-answer))
    learn: Callable[[str, str | None], None] | None = None
    safe: bool = False  # a GET (SAFE_METHODS): may be sent again (NOTE(holder-down))


def kind_of(headers: dict[str, str]) -> str | None:
    """JSON, SSE, or None (not restored) for an answer with these headers."""
    if headers.get("content-encoding", "identity").lower() != "identity":
        return None  # rewritten requests ask for identity (service.py); a proxy may not
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media == "text/event-stream":
        return SSE
    return JSON if media == "application/json" or media.endswith("+json") else None


def _details(req: pb.ProcessingRequest) -> str | None:
    """The ``response.code_details`` attribute Envoy sent (None: not configured)."""
    for attrs in req.attributes.values():
        if "response.code_details" in attrs.fields:
            return attrs.fields["response.code_details"].string_value
    return None


@functools.cache
def _over_budget() -> None:
    """Said once: an answer was given up for the process's budget (NOTE(answer-budget))."""
    log.warning("kvpool epp: the held-bytes budget (--max-held-bytes; answers take half of it "
                "at most) has no room for an answer's held bytes: that answer goes on as the "
                "replica sent it (its model not put back, its response id not learnt); said "
                "once (kvpool/epp/listener.py NOTE(answer-budget))")


class Answer:
    """One call's answer phase (the module docstring)."""

    def __init__(self, wanted: Wanted, mode: int, check: RetryCheck | None, limit: int,
                 refuse: Refuse) -> None:
        self.wanted, self.mode, self.check = wanted, mode, check
        self.limit = limit  # bytes a restore may hold (NOTE(model-restore))
        self.refuse = refuse
        self.restore: ModelRestore | None = None
        self.stopping = False  # the picker stops: the next body message ends the call
        self.ids: AnswerIds | None = None  # a creation's id, while read (NOTE(learn-answer))
        self.attempts: str | None = None  # Envoy's x-envoy-attempt-count of the answer
        self.call: Stream | None = None  # the call its held bytes count on (NOTE(answer-budget))
        self.busy = False  # a message is being answered (service.py let_answers_go)

    @property
    def holding(self) -> bool:
        """Whether bytes of the answer wait in the restore (a cut event, a JSON head)."""
        return self.restore is not None and self.restore.holding > 0

    async def step(self, req: pb.ProcessingRequest) -> tuple[list[pb.ProcessingResponse], bool]:
        """The answers to one response-phase message, and whether the call is done."""
        phase = req.WhichOneof("request")
        if phase == "response_headers":
            return await self.headers(req)
        if phase == "response_body":
            return await self.body(req.response_body.body, req.response_body.end_of_stream)
        out = [pb.ProcessingResponse(response_trailers=pb.TrailersResponse())]
        if self.mode == FULL_DUPLEX and self.restore is not None and self.restore.holding:
            out.insert(0, self.duplex(await self.feed(b"", True), False))
        return out, True

    async def headers(self, req: pb.ProcessingRequest
                      ) -> tuple[list[pb.ProcessingResponse], bool]:
        head = req.response_headers
        fields = {h.key: h.raw_value.decode("latin-1") or h.value for h in head.headers.headers}
        details = _details(req)
        w = self.wanted
        if self.check is not None:
            self.check.answer(fields.get("x-envoy-attempt-count"), details)
        silent = timed_out(fields.get(":status"), details)
        if w.pinned is not None and (silent or envoys_failure(details)):
            down = self.holder_down(w.pinned, details, silent)
            return [await self.refuse(down.status, down.message, down.code, down.param)], True
        if w.learn is not None and fields.get(":status") == "200" and not head.end_of_stream:
            self.attempts = fields.get("x-envoy-attempt-count")
            self.ids = None if (seen := kind_of(fields)) is None else AnswerIds(seen)
        kind = None if w.renamed is None or head.end_of_stream else kind_of(fields)
        if kind is None:  # nothing to restore: full duplex still relays every byte
            return [_PASSED], (self.mode != FULL_DUPLEX or head.end_of_stream) and self.learnt
        self.restore = ModelRestore(*w.renamed, kind, self.limit)
        return [_UNSIZED], False

    def holder_down(self, pinned: str, details: str | None, silent: bool) -> APIError:
        """kvpool/router/affinity.py NOTE(holder-down), as the router answers it: Envoy could
        not reach the holder of ``pinned`` (``details``), or it went ``silent`` (Envoy's 504).
        A GET, or a POST the holder never got, the 503 asking for a retry; a POST it may have
        run, the router's 502, or its 504 when the holder went silent, no retry asked."""
        w = self.wanted
        if w.safe or not silent and not_started(details):
            return HolderDown(pinned, w.param, f"cannot be reached now ({details})")
        return replica_unresponsive(pinned) if silent else replica_failed(pinned)

    @property
    def learnt(self) -> bool:
        """Whether no more of the answer need be read for its id (NOTE(learn-answer))."""
        return self.ids is None or self.ids.done

    async def body(self, chunk: bytes, end: bool) -> tuple[list[pb.ProcessingResponse], bool]:
        if not self.stopping and not self.within(len(chunk)):
            chunk = self.given_up(chunk)
        if self.stopping:  # what is held goes with this chunk, unrestored, and the call ends
            out, end_call = chunk if self.restore is None else self.restore.flush(chunk), True
        else:
            out = chunk if self.restore is None else await self.feed(chunk, end)
            end_call = end
        self.read_id(out, end)
        self.settle()
        if self.mode == FULL_DUPLEX:
            return [self.duplex(out, end)], end_call
        mutated = pb.ProcessingResponse(response_body=pb.BodyResponse(
            response=pb.CommonResponse(body_mutation=pb.BodyMutation(body=out))))
        # a JSON answer's model replaced, its id read: Envoy sends the rest on by itself
        return [mutated], end_call or self.learnt and (self.restore is None
                                                       or self.restore.passing)

    def read_id(self, out: bytes, end: bool) -> None:
        """NOTE(learn-answer): the id reader reads what goes on (the restore's output), never
        the bytes the restore still holds: a chunk is held, and counted, once (NOTE(once))."""
        if self.ids is not None and not self.ids.done and self.wanted.learn is not None:
            if (rid := self.ids.feed(out, end)) is not None:
                self.wanted.learn(rid, self.attempts)

    @property
    def held(self) -> int:
        """The answer's bytes held now: the restore's and the id reader's (never the same)."""
        return (0 if self.restore is None else self.restore.holding) + (
            0 if self.ids is None else len(self.ids.held))

    def within(self, n: int) -> bool:
        """Count what a chunk of ``n`` bytes may leave held against the process's budget
        (kvpool/epp/listener.py NOTE(answer-budget)); False when it has no room.
        NOTE(once): a chunk is held by the restore or by the id reader, never by both (the
        reader is fed what the restore lets go: ``read_id``), so it counts once (counted
        twice, a restored creation's answer gave up near the cap with room left for it)."""
        grows = (self.restore is not None and not self.restore.passing) or (
            self.ids is not None and not self.ids.done)
        need = self.held + (n if grows else 0) - (0 if self.call is None else self.call.kept)
        return self.call is None or need <= 0 or self.call.keep(need)

    def settle(self) -> None:
        """Let go of what was counted and is no longer held; count what ``within`` did not
        foresee (a restored name longer than the target, read for the id), if there is room."""
        if self.call is not None and self.call.kept > self.held:
            self.call.unkeep(self.call.kept - self.held)
        elif self.call is not None and self.call.kept < self.held:
            self.call.keep(self.held - self.call.kept)

    def given_up(self, chunk: bytes) -> bytes:
        """No room in the budget: the held bytes go on with ``chunk`` as they are, and the
        rest of the answer unread (NOTE(answer-budget)); said once."""
        _over_budget()
        out = chunk if self.restore is None else self.restore.flush(chunk)
        self.restore = None
        if self.ids is not None:
            self.ids.drop()
        self.settle()
        return out

    async def feed(self, chunk: bytes, end: bool) -> bytes:
        """The restore's bytes for ``chunk``: a large piece on a worker thread, as a large
        request body is decoded (picker.py ``rewrite``)."""
        assert self.restore is not None
        if self.restore.holding + len(chunk) > INLINE_BYTES:
            if worker_gate is not None:
                await worker_gate()
            return await asyncio.to_thread(self.restore.feed, chunk, end)
        return self.restore.feed(chunk, end)

    @staticmethod
    def duplex(body: bytes, end: bool) -> pb.ProcessingResponse:
        return pb.ProcessingResponse(response_body=pb.BodyResponse(response=pb.CommonResponse(
            body_mutation=pb.BodyMutation(streamed_response=pb.StreamedBodyResponse(
                body=body, end_of_stream=end)))))
