"""One request, proxied to one replica at a time: ``Relay.attempt(replica)``.

What an attempt ends in::

    connect refused / timed out              -> Failure("down"), out of new choices until a
                                                beat passes (wire.py NOTE(connect-timeout))
    no socket of the router's own (EMFILE)   -> its 503 router_out_of_connections, nobody
                                                marked down (NOTE(local-exhaustion))
    replica silent before the answer starts  -> Failure("silent") (replicas.py NOTE(liveness));
                                                Failure("down") while nothing was sent
    connection lost before the answer starts -> Failure("failed") (it took the request and died)
    503 + Retry-After, a refusal's code      -> Failure("full", its own 503: back-pressure);
                                                any other code: passed on (NOTE(refusal-code))
    any other status (a 500 included)        -> the replica's answer, passed on as below
    a JSON (non-SSE) answer                  -> read whole, then passed on; lost midway ->
                                                Failure("failed"): no byte reached the client
    one longer than MAX_BUFFERED bytes       -> passed on as it comes (NOTE(large-answer));
                                                lost midway or silent -> the client's
                                                connection cut (its body ends short)
    an SSE answer                            -> relayed event by event as it comes; lost
                                                midway (killed, reset) or silent -> its
                                                route's error event, the end (stream_end.py
                                                NOTE(stream-end))
    --request-timeout / --first-byte-timeout -> 504 replica_unresponsive, or a stream's error
      ran out                                   event (request_limits.py
                                                NOTE(request-timeout))

Every Failure leaves the client untouched; only a ``retryable`` one (NOTE(retry)) lets the
caller try the next replica. After any byte of an answer went to the client there is no retry.

NOTE(retry): a request is tried on another replica only when the one it went to cannot have
started its work: no connection ("down": refused, unreachable, connect timeout, or found
silent by its health beats before the request was sent), a 503 + Retry-After of a refusal
("full", NOTE(refusal-code) in refusals.py), or, for a method that may be sent again (GET:
SAFE_METHODS), a replica its beats found silent after it was sent, before it answered
("silent", NOTE(liveness): the replica is out, whatever it holds; a request only it can serve
is not retried: affinity.py NOTE(holder-down)). A POST sent to a replica that went silent may
have run there (a Responses creation with ``store`` stored): it is not sent elsewhere, and
gets the 504 ``replica_unresponsive`` of ``give_up``, as Envoy's own timeout answer is
mapped for the endpoint picker (docs/epp.md, "Envoy's own answers").
A connection lost after the request was written, a 5xx other than that 503 and an answer
broken off midway ("failed") are not retried: the replica took the request, and a request
that crashes its replica, or fails the same way everywhere, would otherwise run once per
replica (a poison request taking the fleet down one by one). The caller bounds the retries
too (proxy.py, ``--max-retries``), as Envoy's ``num_retries`` does: a fleet-wide overload
is not multiplied by the number of replicas. A replica's 5xx is its client's answer.

NOTE(event-boundary): SSE bytes are passed on up to the last complete event (a blank line:
``\\n\\n``, or ``\\r\\n\\r\\n`` from a server ending its lines with CRLF, as the SSE spec
allows), so a replica lost in the middle of an event never leaves half a JSON line ahead of the
error event; the replica writes whole events, so nothing waits in the buffer in practice. An
event still open past MAX_PENDING bytes (stream_end.py EventCuts) is passed on as it is: one
replica's endless event (no blank line ever) costs the router that much memory, not all it
sends, and its client gets the bytes as they come. Before, a CRLF stream reached the client
only at its end, all of it held in the router until then.

NOTE(large-answer): a JSON answer is held whole so that a replica lost in its middle can be
retried elsewhere; past MAX_BUFFERED bytes it is passed on as it comes instead, each write
bounded like a stream's. Before, every answer was held whole, and a 5xx answer's body read
whole to be dropped: one replica answering without end (a bug, or hostile) grew the router's
memory for as long as it sent, as did every client asking for a huge answer (a long prompt's
prompt_logprobs, a large embeddings batch) for the time it took. A full replica's 503 body
is read up to MAX_REFUSAL bytes.

NOTE(learn): given ``learn``, a 200 answer's response id (response_ids.py: the start of a JSON
body, or the first SSE events until one carries it) is handed to it with the replica that sent
it: the router's response affinity (affinity.py). The router asks for such answers
uncompressed (relayed.py NOTE(identity-encoding)); one compressed anyway teaches nothing.

NOTE(usage): ``kvpool_router_cached_tokens_total`` sums ``usage.prompt_tokens_details.
cached_tokens`` of every answer passed on: from the final usage chunk of an SSE stream, or
from a JSON body (``cached_tokens_in``: a byte search per chunk, no decoding).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn
from dataclasses import dataclass

from aiohttp import web

from kvpool.router.connect_errors import OutOfConnections, UpstreamDown, out_of_connections
from kvpool.router.refusals import never_started
from kvpool.router.relayed import response_headers
from kvpool.router.replicas import Replica, ReplicaSet, read_up_to
from kvpool.router.request_limits import REQUEST_LIMITS, RequestClock
from kvpool.router.response_ids import StreamIds, response_id_in
from kvpool.router.stream_end import ENDING, EventCuts, StreamEnd
from kvpool.router.wire import Upstream, UpstreamPool
from kvpool.server.connections import DEFAULT_STREAM_WRITE_TIMEOUT, bounded_write
from kvpool.server.middleware import STREAM_STARTED, APIError

if TYPE_CHECKING:
    from kvpool.router.affinity import HolderDown

__all__ = ["RELAYED", "RETRY_AFTER_SECONDS", "SAFE_METHODS", "Failure", "Relay",
           "cached_tokens_in", "give_up", "replica_failed", "replica_unresponsive"]

log = logging.getLogger("kvpool.router")
SSE_TYPE = "text/event-stream"
_DONES = (b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n")
MAX_BUFFERED = 8 << 20  # bytes of a JSON answer held before it is passed on as it comes
MAX_REFUSAL = 64 * 1024  # bytes of a 5xx answer read (NOTE(large-answer))
_CACHED_KEY = b'"cached_tokens":'
_INT = re.compile(rb"\s*(\d+)")
# NOTE(transparent): the replica sees the client's own User-Agent and Accept-Encoding (or none),
# never aiohttp's defaults (the lookups; wire.py adds none): bytes are relayed undecoded
SKIP_AUTO_HEADERS = ("User-Agent", "Accept-Encoding")
RELAYED = web.ResponseKey("kvpool_relayed", bool)  # a replica's answer, with its own headers
RETRY_AFTER_SECONDS = "1"  # when every replica is down: about two heartbeats
# methods whose request may be sent again (RFC 9110 9.2.1): affinity.py NOTE(holder-down)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class Failure:
    """An attempt that gave the client nothing; ``kind``: "down" | "full" | "silent" |
    "failed"."""

    kind: str
    response: web.Response | None = None  # a full replica's own 503, to pass on at the end

    def retryable(self, safe: bool) -> bool:
        """Whether the next replica may be tried: this one cannot have started the work, or,
        for a ``safe`` method, is out, found silent (NOTE(retry))."""
        return self.kind in ("down", "full") or safe and self.kind == "silent"


def give_up(failures: Sequence[Failure], unreachable: HolderDown | None = None,
            safe: bool = False) -> web.Response:
    """The answer when no replica took the request (proxy.py's docstring); ``unreachable``:
    what a request only one replica can serve gets when it found that one down, or, for a
    ``safe`` method (GET), failing or silent before it answered (a follow-up to a response,
    affinity.py NOTE(holder-down)); a POST that may have run there is ``replica_failed``, or
    ``replica_unresponsive`` when it went silent, whatever it named (NOTE(retry))."""
    kinds = {f.kind for f in failures}
    if unreachable is not None and ("down" in kinds or safe and kinds & {"failed", "silent"}):
        raise unreachable
    if not safe and "silent" in kinds:
        raise replica_unresponsive(None if unreachable is None else unreachable.response_id)
    if kinds <= {"full", "down", "silent"}:
        full = [f.response for f in failures if f.response is not None]
        if full:
            return full[-1]  # the replica's own 503 queue_full, Retry-After kept
        raise APIError(503, "no replica can take the request now" if failures else
                       "no healthy replica", code="no_replica",
                       headers={"Retry-After": RETRY_AFTER_SECONDS})
    raise replica_failed(None if unreachable is None else unreachable.response_id)


def replica_failed(response_id: str | None = None) -> APIError:
    """The 502 of a request its replica (the holder of ``response_id``) took and failed
    before answering (NOTE(retry)): not retried, the work may have run there; the endpoint
    picker's too (answers.py). NOTE(one-replica): its words tell of that one replica; those
    tried before it never started the request, no later one was asked. Before, "no replica
    could answer the request" read as if all had been tried (that is the 503 no_replica)."""
    which = "the replica the request went to" if response_id is None else \
        f"the replica holding response '{response_id}'"
    return APIError(502, f"{which} failed before it answered; the request was not retried, "
                    "as it may have run there: send it again only if running it twice is "
                    "safe", code="replica_failed")


def replica_unresponsive(response_id: str | None = None) -> APIError:
    """The 504 of a POST whose replica (the holder of ``response_id``, affinity.py
    NOTE(holder-down)) took it and went silent before answering (NOTE(retry)), as Envoy
    answers an upstream that does not answer in time; no Retry-After, since the work may have
    run there and a blind retry could make a second response. The picker's too (answers.py)."""
    which = "the replica" if response_id is None else \
        f"the replica holding response '{response_id}'"
    return APIError(504, f"{which} went silent before it answered; the request may have run "
                    "there (not retried)", code="replica_unresponsive")


class Relay:
    """Proxies ``request`` (body ``raw``, forwarded ``headers``) to one replica per attempt."""

    def __init__(self, pool: UpstreamPool, replicas: ReplicaSet,
                 request: web.Request, raw: bytes, headers: list[tuple[str, str]],
                 on_cached: Callable[[int], None],
                 write_timeout: float = DEFAULT_STREAM_WRITE_TIMEOUT,
                 learn: Callable[[str, Replica], None] | None = None) -> None:
        self.pool = pool
        self.write_timeout = write_timeout  # seconds one SSE write to the client may wait
        self.replicas = replicas
        self.request = request
        self.raw = raw
        self.headers = headers
        self.on_cached = on_cached  # called with the cached_tokens of a finished answer
        self.resp: web.StreamResponse | None = None  # set once an SSE answer started
        self.passing = False  # a large JSON answer is being passed on (NOTE(large-answer))
        self.learn = learn  # NOTE(learn)
        self.ids = StreamIds() if learn is not None else None  # one SSE answer per Relay
        self.sent = False  # this attempt's request was handed to a socket (NOTE(retry))
        self.broken: Failure | None = None  # its answer started, then broke (NOTE(outlier))
        self.ending = StreamEnd(request.path)  # NOTE(stream-end)
        request[ENDING] = self.ending  # a drain's ending numbers on from it (drain.py)
        self.clock = RequestClock(request.app.get(REQUEST_LIMITS))  # NOTE(request-timeout)

    async def attempt(self, replica: Replica) -> web.StreamResponse | Failure:
        deadline, self.sent, self.broken = None, False, None
        try:
            async with self.clock.bound(), replica.lease() as deadline:
                return await self._exchange(replica)
        except TimeoutError:
            if (bound := self.clock.ran_out()) is not None:
                return await self._timed_out(replica, self.clock.said(bound))
            if deadline is None or not deadline.expired():
                raise
            self.broken = Failure("silent") if self.sent else None
            if self.passing:
                self._cut(replica, "went silent")
            if self.resp is None:
                return Failure("silent" if self.sent else "down")
            log.warning("replica %s went silent mid-stream: ended it with an error event",
                        replica.url)
            await self._end(self.ending.error(504, "the replica stopped answering mid-stream",
                                              "replica_unresponsive"))
            return self.resp

    async def _timed_out(self, replica: Replica, said: str) -> web.StreamResponse:
        """NOTE(request-timeout): a 504 before the answer started, else its end."""
        log.warning("replica %s: %s; ended it", replica.url, said)
        if self.passing:
            self._cut(replica, "ran out of time")
        if self.resp is None:
            raise APIError(504, f"{said}; the request may have run there (not retried)",
                           code="replica_unresponsive")
        await self._end(self.ending.error(504, said, "replica_unresponsive"))
        return self.resp

    async def _exchange(self, replica: Replica) -> web.StreamResponse | Failure:
        try:
            upstream = await self.pool.request(
                replica.url, self.request.method, self.request.rel_url.raw_path_qs,
                self.headers, self.raw, replica.hear,  # its bytes: heard (NOTE(liveness))
                self._sent, self.replicas.tls)  # replica_tls.py NOTE(replica-ca)
        except UpstreamDown as exc:
            self.replicas.mark_down(replica, exc.why)  # connect_errors.py NOTE(why-down)
            return Failure("down")
        except OutOfConnections:  # the router's own, not the replica's: NOTE(local-exhaustion)
            raise out_of_connections() from None
        except OSError as exc:  # wire.UpstreamLost among them
            log.warning("replica %s lost a request before answering: %s (not retried: "
                        "it took the request)", replica.url, exc)
            return Failure("failed")
        self.clock.started()  # its status line came (NOTE(request-timeout))
        async with upstream:
            if upstream.status == 503 and "Retry-After" in upstream.headers:
                return await self._refused(replica, upstream)
            if upstream.headers.get("Content-Type", "").startswith(SSE_TYPE):
                return await self._stream(replica, upstream)
            try:
                body, whole = await read_up_to(upstream.readany, MAX_BUFFERED)
            except OSError as exc:
                log.warning("replica %s broke off an answer: %s", replica.url, exc)
                return Failure("failed")
            if not whole:
                return await self._pass_on(replica, upstream, body)
        if (cached := cached_tokens_in(body)) is not None:
            self.on_cached(cached)
        self._learn_plain(replica, upstream, body)
        resp = web.Response(status=upstream.status, body=body,
                            headers=response_headers(upstream.headers))
        resp[RELAYED] = True
        return resp

    def _sent(self) -> None:
        self.sent = True

    async def _refused(self, replica: Replica, upstream: Upstream) -> web.Response | Failure:
        """A 503 + Retry-After: "full" if it never ran (NOTE(refusal-code)), else passed on."""
        body: bytes | None = b""
        with contextlib.suppress(OSError):
            body, whole = await read_up_to(upstream.readany, MAX_REFUSAL)
            body = body if whole else None  # NOTE(large-answer): not read on, not passed on
        unstarted = never_started(replica.url, body)
        if body is None:
            return Failure("full")  # the router's own 503 then
        full = web.Response(status=503, body=body, headers=response_headers(upstream.headers))
        full[RELAYED] = True
        return Failure("full", full) if unstarted else full

    async def _stream(self, replica: Replica, upstream: Upstream) -> web.StreamResponse:
        resp = await self._start(upstream)
        self.resp = resp
        cached = None
        events = EventCuts()
        done = False  # the last event passed on was [DONE]
        while True:
            try:
                chunk = await upstream.readany()
            except OSError as exc:  # wire.UpstreamLost: reset, closed, malformed
                if done:  # the answer was whole; only the connection's close went wrong
                    break
                log.warning("replica %s broke off a stream: %s", replica.url, exc)
                self.broken = Failure("failed")
                await self._end(self.ending.error(502, f"the replica broke off the stream "
                                                  f"({type(exc).__name__})", "replica_failed"))
                return resp
            if not chunk:
                break
            if out := events.cut(chunk):
                if _CACHED_KEY in out:  # the usage event (the last one but [DONE])
                    cached = cached_tokens_in(out)
                self._learn_from(replica, out)
                self.ending.passed(out)
                done = out.endswith(_DONES)
                # bounded like the replica's own: leaving the upstream's block then closes
                # the replica's connection, which aborts the request there
                await bounded_write(self.request, resp, out, self.write_timeout)
        await self._end(events.rest())
        if cached is not None:
            self.on_cached(cached)
        return resp

    async def _pass_on(self, replica: Replica, upstream: Upstream,
                       head: bytes) -> web.StreamResponse:
        """NOTE(large-answer): ``head`` (the answer's first bytes) and the rest as it comes."""
        resp = await self._start(upstream)
        self.passing = True
        self._learn_plain(replica, upstream, head)
        cached, chunk = None, head
        while chunk:
            if (found := cached_tokens_in(chunk)) is not None:  # the usage is near the end
                cached = found
            await bounded_write(self.request, resp, chunk, self.write_timeout)
            try:
                chunk = await upstream.readany()
            except OSError as exc:
                self.broken = Failure("failed")
                self._cut(replica, f"broke off ({exc})")
        with contextlib.suppress(ConnectionError):  # the client may be gone: nothing to tell
            await resp.write_eof()
        if cached is not None:
            self.on_cached(cached)
        return resp

    async def _start(self, upstream: Upstream) -> web.StreamResponse:
        """The client's answer started with ``upstream``'s status and headers; from here
        on the error middleware must not answer."""
        resp = web.StreamResponse(status=upstream.status,
                                  headers=response_headers(upstream.headers))
        resp[RELAYED] = True
        await resp.prepare(self.request)
        self.request[STREAM_STARTED] = True
        return resp

    def _learn_plain(self, replica: Replica, upstream: Upstream, head: bytes) -> None:
        """NOTE(learn): the response id at the start of an uncompressed 200 JSON answer."""
        if self.learn is not None and upstream.status == 200 and _plain(upstream.headers):
            if (rid := response_id_in(head)) is not None:
                self.learn(rid, replica)

    def _cut(self, replica: Replica, what: str) -> NoReturn:
        """A large answer's replica failed midway: the client's body ends short, its
        connection cut (no more can be told in a JSON body already half sent)."""
        log.warning("replica %s %s in the middle of a large answer: cut the client's "
                    "connection", replica.url, what)
        if self.request.transport is not None:
            self.request.transport.abort()
        # the exit aiohttp takes for a client that disconnected (connections.py NOTE(exit))
        raise asyncio.CancelledError("the replica failed midway") from None

    async def _end(self, tail: bytes) -> None:
        assert self.resp is not None
        with contextlib.suppress(ConnectionError):  # the client may be gone: nothing to tell
            if tail:
                await self.resp.write(tail)
            await self.resp.write_eof()

    def _learn_from(self, replica: Replica, events: bytes) -> None:
        """NOTE(learn) for a stream's whole ``events``, until its id is found or given up."""
        learn, ids, resp = self.learn, self.ids, self.resp
        if learn is None or ids is None or ids.done or resp is None or resp.status != 200:
            return
        if _plain(resp.headers) and (rid := ids.feed(events)) is not None:
            learn(rid, replica)


def _plain(headers: Mapping[str, str]) -> bool:
    """Whether an answer's body bytes are its text (no Content-Encoding but identity)."""
    return headers.get("Content-Encoding", "identity").strip().lower() == "identity"


def cached_tokens_in(data: bytes) -> int | None:
    """The last ``"cached_tokens": N`` in a JSON answer or in SSE events, None when absent.
    NOTE(scan): the key's bytes are searched (C speed), nothing is decoded: inside a JSON
    string a quote is escaped, so ``"cached_tokens":`` only ever matches the key itself."""
    at = data.rfind(_CACHED_KEY)
    if at < 0:
        return None
    digits = _INT.match(data, at + len(_CACHED_KEY))
    return int(digits.group(1)) if digits is not None else None
