"""RequestGate: the edge's rules on who may start a request, judged once per request.

A generation handler calls the gate once, after its body is parsed and before any prompt
reaches the engine; the ticket it gets opens the engine streams and gives everything back::

    ticket = gate.admit(prompts, params, cache_salt)   # params: one per prompt
        draining                      -> 503 shutting_down + Retry-After
        (each refusal is counted by reason: kvpool/metrics/admission.py NOTE(refusals))
        tenant                        the middleware's (tenant.py), never the client's salt
        cache salt                    CacheNamespace.salt(tenant, cache_salt)
        quota (--tenant-block-quota)  need = the pool's own block count (RequestChecker,
                                      ``blocks_held``), summed over the prompts
                                      (``_need``: child requests apart)
                                      need > N              -> 400 tenant_quota_exceeded
                                      reserved + need > N   -> 429 tenant_quota_exceeded
    ticket.open(i, ...)               engine.generate with the tenant and salt; the stream is
                                      in the gate's live registry until it ends, and gives
                                      prompt i's share of the quota back when it does
    ticket.close()                    the handler's finally: whatever is still reserved

Why the quota lives here (quota.py): admission belongs to the scheduler, which knows nothing
of tenants; the rule the block count comes from is the pool's, so the edge and the pool never
disagree on what a request can hold.

Drain (``kvpool serve``, serve.py, on one deadline; aiohttp's own runner cleanup waited its
timeout twice and cut streams without ``[DONE]``)::

    t0 SIGTERM    stop listening; admit answers 503 shutting_down, /health 503;
                  shed_queued(): live streams with no update yet (waiting in the engine queue)
                  are aborted and their handlers answer 503 shutting_down (JSON, Retry-After)
    ...           running requests may finish
    t0+timeout    abort_all(): the engine ends the rest with finish "abort"; a stream handler
                  then writes an error event (OpenAI error JSON) and ``data: [DONE]``
    +grace        aiohttp closes whatever is left (short runner timeout), engine.shutdown

Invariant: ``live`` counts exactly the streams a handler holds that have not ended, and a
tenant's reservation is the sum of the shares of its tickets' streams that have not ended.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kvpool.errors import QueueFullError, RequestError
from kvpool.runtime.engine.output_processor import RequestOutput, aclose_updates
from kvpool.server.cache_namespace import CacheNamespace
from kvpool.server.child_requests import ChildRequests
from kvpool.server.engine_client import EngineClient, UpdateStream
from kvpool.server.middleware import APIError
from kvpool.server.quota import QUOTA_CODE, TenantBlockQuota
from kvpool.server.tenant import current_tenant

if TYPE_CHECKING:
    from kvpool.runtime.model import SamplingParams

__all__ = ["GatedStream", "RequestGate", "Ticket", "shutting_down_error"]

log = logging.getLogger("kvpool.server")


def shutting_down_error() -> APIError:
    return APIError(503, "the server is shutting down; retry on another replica or later",
                    code="shutting_down", headers={"Retry-After": "1"})


class RequestGate:
    """The tenant, quota and drain rules over one engine (see the module docstring)."""

    def __init__(self, engine: EngineClient, namespace: CacheNamespace,
                 quota: TenantBlockQuota | None = None) -> None:
        self.engine = engine
        self.namespace = namespace  # the salts' rule (the lookup route shares it)
        self.quota = quota  # None: no --tenant-block-quota
        if quota is not None:
            self._say_quota(quota.limit)
        self.draining = False  # set on shutdown: admit answers 503, /health 503
        self._live: dict[int, GatedStream] = {}
        self._next_key = 0

    def admit(self, prompts: Sequence[list[int]], params: Sequence[SamplingParams],
              cache_salt: str | None) -> Ticket:
        """The one check of a request at the edge; raises the 503 / 400 / 429 it earns.
        ``params``: each prompt's (its own max_tokens: NOTE(clamp) in context_budget.py)."""
        if self.draining:
            self.refused("shutting_down")
            raise shutting_down_error()
        checker = self.engine.core.checker  # each prompt's group of forks (NOTE(apart)), once
        groups = [checker.fork_group(len(ids), p) for ids, p in zip(prompts, params)]
        self._check_in_flight(prompts, params, groups)
        tenant = current_tenant()
        shares = [self._need(len(ids), p, g) for ids, p, g in zip(prompts, params, groups)] \
            if self.quota else []
        if shares:
            self._reserve(tenant, shares, params[0])
        return Ticket(self, tenant, self.namespace.salt(tenant, cache_salt), shares, groups)

    def _check_in_flight(self, prompts: Sequence[list[int]], params: Sequence[SamplingParams],
                         groups: list[int]) -> None:
        """NOTE(apart) in kvpool/sched/request_checker.py: the engine requests a request runs
        as (one per prompt, or per group of forks where its sequences run as child requests)
        can never all be in flight past --max-queue: every try would be the retryable 503
        queue_full (vLLM has no bound by default), so it is a 400 naming n, and the largest n
        that runs. Several prompts count together."""
        bound, n = self.engine.config.max_queue, params[0].n
        runs = sum(-(-p.n // g) for p, g in zip(params, groups))
        if bound is None or runs <= bound:
            return
        lo, hi = 1, n - 1  # runs(lo) <= bound: one request per prompt, at most --max-queue
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self._runs(prompts, params, mid) <= bound else (lo, mid - 1)
        self.refused("over_queue")
        raise RequestError(
            f"n={n} sequences of {len(prompts)} prompt(s) run here as {runs} requests (one per "
            f"group of forks that fit together), more than --max-queue={bound} requests in "
            f"flight: use n <= {lo}", "n", "n_too_large_for_queue")

    def _runs(self, prompts: Sequence[list[int]], params: Sequence[SamplingParams],
              n: int) -> int:
        """The engine requests the prompts run as with ``n`` sequences each (the advice)."""
        checker = self.engine.core.checker
        total = 0
        for ids, p in zip(prompts, params):
            p = dataclasses.replace(p, n=n)
            total += -(-n // checker.fork_group(len(ids), p))
        return total

    def _say_quota(self, limit: int) -> None:
        """NOTE(short-quota): a quota below what one request of the whole context may hold
        refuses (400) every request that does not send max_tokens where the default is the
        room left (chat, Responses); say so once, at start, with the fix."""
        whole = self.engine.core.checker.blocks_held(1, self.engine.max_model_len - 1, 1)
        if limit < whole:
            log.warning("--tenant-block-quota %d is below the %d KV blocks one request of the "
                        "whole context (%d tokens) may hold: chat and Responses requests "
                        "without max_tokens (the room left, by default) will get 400 "
                        "tenant_quota_exceeded; raise the quota to %d or more, or lower "
                        "--max-model-len", limit, whole, self.engine.max_model_len, whole)

    def _need(self, prompt_len: int, params: SamplingParams, group: int) -> int:
        """The pool's count for the request's sequences as forks, or, where they run as child
        requests of ``group`` forks (NOTE(apart) in kvpool/sched/request_checker.py), one
        child's for each that can run at once (children admitted together each compute the
        prompt: no block is surely shared; a waiting child holds none), never past the pool."""
        checker = self.engine.core.checker
        max_tokens = params.max_tokens or self.engine.max_model_len
        held = checker.blocks_held(prompt_len, max_tokens, group)
        if group >= params.n:
            return held
        at_once = min(-(-params.n // group), -(-(checker.max_seqs or params.n) // group))
        return min(at_once * held, self.engine.core.manager.device_pool.num_blocks)

    def _reserve(self, tenant: str, shares: list[int], params: SamplingParams) -> None:
        quota = self.quota
        assert quota is not None
        need = sum(shares)
        if need > quota.limit:
            self.refused("over_tenant_quota")
            prompts = "" if len(shares) == 1 else f"{len(shares)} prompts, "
            raise RequestError(
                f"this request may need {need} KV blocks ({prompts}n={params.n}, "
                f"max_tokens={params.max_tokens}) but a tenant may hold at most {quota.limit}: "
                "lower max_tokens or n", "max_tokens", QUOTA_CODE)
        if not quota.try_reserve(tenant, need):
            self.refused("tenant_quota")
            raise APIError(429, f"this tenant's requests already hold up to "
                                f"{quota.reserved(tenant)} of its {quota.limit} KV blocks; retry "
                                "later", code=QUOTA_CODE, headers={"Retry-After": "1"})

    def refused(self, reason: str) -> None:
        """Count one refused request (kvpool/metrics/admission.py NOTE(refusals))."""
        self.engine.metrics.admission.reject(reason)

    def track(self, inner: UpdateStream, request_id: str | None,
              on_end: Callable[[], None]) -> GatedStream:
        """``inner`` in the live registry until it ends (then ``on_end`` runs, once)."""
        self._next_key += 1
        stream = GatedStream(self, inner, self._next_key, on_end)
        if stream.request_id is None:
            stream.request_id = request_id
        self._live[self._next_key] = stream
        return stream

    def forget(self, key: int) -> None:
        self._live.pop(key, None)

    @property
    def live(self) -> int:
        return len(self._live)

    async def shed_queued(self) -> int:
        """Abort every live request that has had no update yet; their handlers answer 503."""
        shed = [s for s in self._live.values() if not s.started and not s.shed]
        for s in shed:
            s.shed = True
            await s.abort()
        return len(shed)

    async def abort_all(self) -> int:
        """Abort every live request: streams end with an error event and [DONE]."""
        live = list(self._live.values())
        for s in live:
            await s.abort()
        return len(live)


class Ticket:
    """One admitted request: its tenant, its namespaced salt, its quota shares and each
    prompt's group of forks."""

    def __init__(self, gate: RequestGate, tenant: str, salt: str | None,
                 shares: list[int], groups: list[int]) -> None:
        self.gate = gate
        self.tenant = tenant
        self.salt = salt
        self.shares = shares  # blocks still reserved per prompt ([] without a quota)
        self.groups = groups  # per prompt: RequestChecker.fork_group, asked once by admit

    def open(self, index: int, request_id: str, ids: list[int], params: SamplingParams, *,
             priority: int = 0, checked: bool = False) -> GatedStream:
        """Prompt ``index``'s engine stream (``checked``: the pool rules were asked): its n
        sequences as forks, or as n child requests where forks cannot run (NOTE(apart) in
        kvpool/sched/request_checker.py; child_requests.py)."""
        engine = self.gate.engine
        inner: UpdateStream
        try:
            group = self.groups[index]
            if group >= params.n:
                inner = engine.generate(request_id, ids, params, cache_salt=self.salt,
                                        priority=priority, tenant=self.tenant, checked=checked)
            else:
                inner = ChildRequests(engine, request_id, ids, params, group=group,
                                      cache_salt=self.salt, priority=priority,
                                      tenant=self.tenant, checked=checked)
        except QueueFullError:  # --max-queue, or the engine stopping (drain)
            self.gate.refused("shutting_down" if self.gate.draining else "queue_full")
            raise
        return self.gate.track(inner, request_id, lambda: self.release(index))

    def release(self, index: int) -> None:
        """Give prompt ``index``'s share back (idempotent)."""
        quota = self.gate.quota
        if quota is not None and self.shares and self.shares[index]:
            quota.release(self.tenant, self.shares[index])
            self.shares[index] = 0

    def close(self) -> None:
        """Give back every share not yet given back (a stream never opened, a failure)."""
        for i in range(len(self.shares)):
            self.release(i)


class GatedStream:
    """One prompt's engine updates; raises 503 shutting_down if it was shed before its first
    update, and leaves the registry (giving its share back) exactly once when it ends."""

    def __init__(self, gate: RequestGate, inner: UpdateStream, key: int,
                 on_end: Callable[[], None]) -> None:
        self._gate = gate
        self._inner = inner
        self._key = key
        self._on_end = on_end
        self._open = True
        self.request_id: str | None = getattr(inner, "request_id", None)
        self.started = False  # an update arrived: the engine scheduled it (not just queued)
        self.shed = False  # aborted by shed_queued before it started

    def _end(self) -> None:
        if self._open:
            self._open = False
            self._gate.forget(self._key)
            self._on_end()

    def __aiter__(self) -> GatedStream:
        return self

    async def __anext__(self) -> RequestOutput:
        try:
            out = await self._inner.__anext__()
        except StopAsyncIteration:
            self._end()
            if self.shed and not self.started:
                raise shutting_down_error() from None
            raise
        except BaseException:  # a failure or a cancellation: the request ended
            self._end()
            raise
        if self.shed and not self.started and _aborted(out):
            self._end()
            raise shutting_down_error()
        self.started = True
        if out.finished:
            self._end()
        return out

    async def abort(self) -> None:
        """Abort the request in the engine: its children (child_requests.py), or its id."""
        if isinstance(self._inner, ChildRequests):
            await self._inner.abort()
        elif self.request_id is not None:
            await self._gate.engine.abort(self.request_id)

    async def aclose(self) -> None:
        try:
            await aclose_updates(self._inner)
        finally:
            self._end()


def _aborted(out: RequestOutput) -> bool:
    return bool(out.finished) and any(c.finish_reason == "abort" for c in out.outputs)
