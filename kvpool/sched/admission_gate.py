"""AdmissionGate: the scheduler's questions about a waiting request, answered in one place.

- ``units``: how the request would be prefilled (one unit per distinct token list: a new or
  agreeing request shares one, a recomputed ``n > 1`` request whose outputs diverged has one
  per sequence, all reusing the first one's blocks of their common prefix), with the block
  hashes of each unit, built once per stay in the queue;
- ``tokens_to_compute`` / ``allocations``: what admitting a unit costs the step's token
  budget, and the manager's allocation requests for it;
- ``admission`` / ``status``: the manager's one admission rule (OK / LATER / NEVER with its
  reason) over those units; the gate adds no rule of its own;
- ``never_reason``: why the request can never run (context, ``max_num_seqs``, the tenant cap,
  or the pool), None if it may; the context rule itself is ``exceeds_context``, which the
  server's edge and the engine's checks ask too;
- ``next_waiting``: which waiting request is next under tenant fairness.

The gate reads the scheduler's queues and the manager; it changes nothing but a request's
cached ``units`` / ``prompt_block_hashes``.

RequestChecker: the engine's refusal at submission of what it could never serve, by the same
rules (``exceeds_context`` and the manager's admission). Each refusal is a
:class:`~kvpool.errors.RequestError` naming the field (the server turns it into an OpenAI error
with HTTP 400) and, where a fix exists, the fix. Checked in order:

    empty prompt                          -> prompt
    a token id outside [0, vocab)         -> prompt
    n sequences > max_num_seqs (or the    -> n, code n_too_large_for_batch (a request's
      tenant cap): they never run at once    sequences run together; it used to be queued
                                             and failed as a 500)
    prompt + max_tokens > max_model_len   -> max_tokens (prompt, if the prompt alone is too
                                             long), code context_length_exceeded
    admission NEVER for prompt + 1 token  -> prompt, code prompt_too_long_for_pool
    prompt + max_tokens > the whole pool  -> max_tokens, code context_length_exceeded
    n such sequences > the whole pool     -> n, code n_too_large_for_pool (the prompt's
                                             full blocks held once, each sequence's own
                                             generated blocks apart); a max_tokens the
                                             client did not send is lowered first
                                             (``room``, NOTE(fit-default))

The pool check asks the manager's one admission rule, the scheduler's own, so a request
accepted there is never ignored later for its size. ``blocks_held`` is the same rule's count of
the blocks a request's tables can reference at most (the server's per-tenant quota charges it).
A caller that has judged the input rules itself (the server's edge: protocol.py) asks only
``check_pool``; everyone else gets both from ``check``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from kvpool.core import Admission, AllocStatus, BlockSpaceManager, SeqAlloc
from kvpool.errors import CONTEXT_LENGTH_CODE, RequestError, context_length_error
from kvpool.sched.config import SchedulerConfig
from kvpool.sched.sequence import PrefillUnit, Sequence, SequenceGroup, StopParams
from kvpool.sched.state import RequestQueue


def recompute_units(g: SequenceGroup) -> list[list[Sequence]]:
    """Sequences grouped as a recompute would prefill them: one shared unit when the live
    sequences' outputs agree, else one unit per sequence."""
    live = g.live_seqs
    if not live:
        return []
    first = live[0].output_token_ids
    if all(s.output_token_ids == first for s in live[1:]):
        return [live]
    return [[s] for s in live]


def exceeds_context(prompt_len: int, generate: int, max_model_len: int) -> bool:
    """The context-length rule, judged here for every caller (this gate's ``never_reason``,
    the server's parser, RequestChecker below): a prompt of ``prompt_len`` tokens
    followed by ``generate`` generated ones does not fit ``max_model_len`` positions. Each
    caller says how many must follow: the server's edge and the engine's checks at least one
    (the prompt must leave room to generate) or the ``max_tokens`` asked; the scheduler none,
    as it stops a sequence at ``max_model_len`` itself (completion.py)."""
    return prompt_len + generate > max_model_len


class AdmissionGate:
    """Admission questions over the scheduler's manager and config (both lent to it)."""

    def __init__(self, manager: BlockSpaceManager, config: SchedulerConfig,
                 anything_running: Callable[[], bool] = lambda: False) -> None:
        self.manager = manager
        self.config = config
        self.anything_running = anything_running  # the scheduler's: NOTE(alone)
        self.tenanted = False  # some request named a tenant (fair admission is on)

    def note_tenant(self, tenant: str | None) -> None:
        """A request of ``tenant`` was queued (None / "": the default tenant)."""
        self.tenanted = self.tenanted or bool(tenant)

    @property
    def fair(self) -> bool:
        """Whether ``next_waiting`` weighs tenants (a tenant was named, or a cap is set)."""
        return self.tenanted or self.config.tenant_max_running_seqs is not None

    def units(self, g: SequenceGroup) -> list[PrefillUnit]:
        """Admission units of waiting ``g`` (built once per stay in the waiting queue)."""
        if g.units is not None:
            return g.units
        mgr = self.manager
        caching = mgr.caching
        if g.prompt_block_hashes is None:
            g.prompt_block_hashes = (mgr.hasher.hash_blocks(g.prompt_token_ids, g.cache_salt)
                                     if caching else [])
        units = []
        for seqs in recompute_units(g):
            s = seqs[0]
            if not s.output_token_ids:
                hashes = g.prompt_block_hashes
            else:
                hashes = mgr.hasher.hash_blocks(s.all_token_ids(), g.cache_salt) if caching else []
            units.append(PrefillUnit(seqs, s.num_tokens, hashes))
        shared = self._common_full_tokens(units)
        if shared:
            for u in units[1:]:
                u.after, u.shared_tokens = units[0], shared
        g.units = units
        return units

    def _common_full_tokens(self, units: list[PrefillUnit]) -> int:
        """Tokens in the full blocks every unit starts with (their common prefix), short of
        any unit's last token (each computes at least one of its own): 0 for one unit."""
        if len(units) < 2:
            return 0
        outs = [u.lead.output_token_ids for u in units]
        shortest = min(len(o) for o in outs)
        common = 0
        while common < shortest and all(o[common] == outs[0][common] for o in outs):
            common += 1
        p = len(units[0].lead.group.prompt_token_ids)
        bs = self.manager.block_size
        return min((p + common) // bs, (p + shortest - 1) // bs) * bs

    def shared_blocks(self, units: list[PrefillUnit]) -> int:
        """Blocks each unit after the first reuses from it (``manager.admission``'s
        ``shared_blocks``)."""
        return units[-1].shared_tokens // self.manager.block_size if len(units) > 1 else 0

    def tokens_to_compute(self, u: PrefillUnit) -> int:
        """Tokens of ``u`` its first chunk computes: all but the prefix hits allocation
        would take now (the same cap: at least one token is left to compute)."""
        mgr = self.manager
        bs = mgr.block_size
        if u.lead.group.skip_reading_prefix_cache:
            return u.num_tokens
        return u.num_tokens - bs * min(mgr.prompts.prefix_hits(u.block_hashes),
                                       (u.num_tokens - 1) // bs)

    def allocations(self, g: SequenceGroup, units: list[PrefillUnit]) -> list[SeqAlloc]:
        """The manager's allocation requests for ``g``'s units (one block table per live
        sequence, shared prompt blocks per unit); ``resumed`` when ``g`` was preempted before
        (recomputed: NOTE(preempted-queries) in kvpool/core/block_table.py); ``skip_read``
        for every admission of a request that reads no cache (NOTE(skip-read), same file)."""
        caching = self.manager.caching
        bs = self.manager.block_size
        resumed = g.num_preemptions > 0
        skip = g.skip_reading_prefix_cache
        return [SeqAlloc([s.seq_id for s in u.seqs],
                         g.prompt_token_ids if not u.lead.output_token_ids
                         else u.lead.all_token_ids(),
                         u.block_hashes if caching else None, g.cache_salt,
                         share_with=None if u.after is None else u.after.lead.seq_id,
                         num_shared=u.shared_tokens // bs, resumed=resumed, skip_read=skip)
                for u in units]

    def admission(self, units: list[PrefillUnit], freeable: int = 0) -> Admission:
        """NOTE(alone): an admitted request is never dropped for capacity. Its generated
        tokens may outgrow the pool minus the watermark (the watermark only keeps room for
        running requests to grow; appends ignore it), so a request coming back to be
        recomputed with output tokens is NEVER only if the whole pool cannot hold it; one
        that needs the watermark's blocks waits (LATER) until nothing else runs, and then
        may take every block. The engine refuses up front (RequestChecker, below) what
        outgrows the whole pool: prompt + max_tokens, and ``n`` such sequences holding the
        prompt's full blocks once, as their recompute units do (``shared_blocks``)."""
        mgr = self.manager
        skip = bool(units) and units[0].lead.group.skip_reading_prefix_cache
        # NOTE(skip-read): no hashes, no hits: every block it takes is counted
        prompts = [(u.num_tokens, () if skip else u.block_hashes) for u in units]
        shared = self.shared_blocks(units)
        adm = mgr.admission(prompts, freeable=freeable, shared_blocks=shared)
        if adm.status is AllocStatus.OK or not any(u.lead.output_token_ids for u in units):
            return adm
        whole = mgr.admission(prompts, freeable=freeable, watermark=False, shared_blocks=shared)
        if whole.status is AllocStatus.NEVER or not self.anything_running():
            return whole
        if adm.status is AllocStatus.NEVER:
            return Admission(AllocStatus.LATER, adm.need, adm.capacity,
                             f"{adm.reason.removesuffix(': it can never fit')}: it waits until "
                             "it runs alone")
        return adm

    def status(self, units: list[PrefillUnit]) -> AllocStatus:
        return self.admission(units).status

    def never_reason(self, g: SequenceGroup, units: list[PrefillUnit] | None) -> str | None:
        """Why ``g`` can never run, or None; without ``units`` the pool is not asked."""
        cfg = self.config
        p = len(g.prompt_token_ids)
        if exceeds_context(p, 0, cfg.max_model_len):
            return f"prompt has {p} tokens, more than max_model_len={cfg.max_model_len}"
        if g.num_live > cfg.max_num_seqs:
            return (f"request has {g.num_live} sequences, more than max_num_seqs="
                    f"{cfg.max_num_seqs}: it could never run")
        cap = cfg.tenant_max_running_seqs
        if cap is not None and g.num_live > cap:
            return (f"request has {g.num_live} sequences, more than tenant_max_running_seqs="
                    f"{cap}: it could never run")
        if units is None:
            return None
        what = "prompt" if all(not u.lead.output_token_ids for u in units) else \
            "prompt + generated tokens"
        return f"{what} {self.admission(units).reason}"

    def next_waiting(self, waiting: RequestQueue,
                     per_tenant: Counter[str]) -> SequenceGroup | None:
        """The waiting request to admit next: within the best priority class that has one
        (fcfs: a single class), the oldest request of the tenant running the fewest
        sequences, skipping tenants whose next request would pass tenant_max_running_seqs.

        NOTE(fair): least-running-first, not round-robin, so a tenant that already holds many
        slots yields every freed slot to one that holds fewer; within a tenant the queue order
        (FCFS) stands. A request too big for the cap is returned so the caller ignores it."""
        if not self.fair:
            return waiting[0]  # NOTE(speed): one tenant, no cap: the queue order
        cfg = self.config
        cap = cfg.tenant_max_running_seqs
        best: SequenceGroup | None = None
        seen: set[str] = set()
        cls = None
        for g in waiting:
            key = g.priority if cfg.policy == "priority" else 0
            if key != cls:
                if best is not None:
                    return best  # the best class had an eligible request
                cls = key
                seen.clear()
            if g.tenant in seen:
                continue  # FCFS within a tenant: only its oldest request is a candidate
            seen.add(g.tenant)
            if cap is not None and g.num_live <= cap < per_tenant[g.tenant] + g.num_live:
                continue
            if best is None or per_tenant[g.tenant] < per_tenant[best.tenant]:
                best = g
                if not per_tenant[g.tenant]:
                    return best  # nobody runs fewer than none; ties go to the older
        return best


class RequestChecker:
    """Validation against the model's vocabulary and context and the block pool (lent by the
    engine: asked, never changed). A response_format is checked where it is compiled, off
    this (caller's) thread: EngineCore.compile_grammar."""

    def __init__(self, vocab_size: int, max_model_len: int, manager: BlockSpaceManager,
                 max_seqs: int | None = None) -> None:
        """``max_seqs``: the most sequences one request may run at once (max_num_seqs, or
        the tenant cap when lower: never_reason's rules); None: not checked here."""
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.manager = manager
        self.max_seqs = max_seqs

    def check(self, prompt_ids: list[int], params: StopParams) -> None:
        """Raise RequestError for what can never be served (see the module docstring)."""
        self.check_input(prompt_ids, params)
        self.check_pool(len(prompt_ids), params)

    def check_input(self, prompt_ids: list[int], params: StopParams) -> None:
        """The prompt against the vocabulary and the context (not the pool)."""
        if not prompt_ids:
            raise RequestError("the prompt is empty", "prompt")
        vocab = self.vocab_size
        bad = next((t for t in prompt_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary [0, {vocab})",
                               "prompt")
        n = len(prompt_ids)
        limit = self.max_model_len
        alone = exceeds_context(n, 1, limit)  # the prompt leaves no room to generate
        if alone or exceeds_context(n, params.max_tokens or 1, limit):
            raise context_length_error(
                limit, f"the request has {n} prompt tokens and asks for {params.max_tokens} "
                "more", "prompt" if alone else "max_tokens")

    def check_pool(self, p: int, params: StopParams) -> None:
        """The pool checks for a prompt of ``p`` tokens: the prompt, then one sequence, then
        all ``n`` of them; first, whether ``n`` sequences can ever run at once."""
        if self.max_seqs is not None and params.n > self.max_seqs:
            raise RequestError(
                f"n={params.n} sequences (best_of's, where it is larger) run together, more "
                f"than the {self.max_seqs} the server runs at once (--max-num-seqs, or the "
                f"tenant's cap): use n <= {self.max_seqs}", "n", "n_too_large_for_batch")
        mgr = self.manager
        adm = mgr.admission([(p + 1, ())])  # the scheduler's own rule
        if adm.status is AllocStatus.NEVER:
            raise RequestError(f"the prompt (+1 token) {adm.reason}: shorten it or raise "
                               "--kv-cache-memory", "prompt", "prompt_too_long_for_pool")
        if (asked := self._asked(p, params)) is None:
            return
        m, said = asked
        # NOTE(alone): an admitted request is never dropped for capacity; alone it may
        # take every block, but no more: refuse what outgrows the whole pool now (its
        # table holds prompt + max_tokens - 1 tokens at most: the last is never stored)
        total, bs = mgr.device_pool.num_blocks, mgr.block_size
        if self._group_need(p, m, 1).status is AllocStatus.NEVER:
            raise RequestError(
                f"the request has {p} prompt tokens and {said}: more than the KV "
                f"cache's {total} blocks of {bs} tokens can hold; use max_tokens <= "
                f"{self._fitting(p, m, params.n)} or raise --kv-cache-memory",
                "max_tokens", CONTEXT_LENGTH_CODE)
        seqs = params.n
        need = self._group_need(p, m, seqs)
        if need.status is AllocStatus.NEVER:
            fit = next(k for k in range(seqs - 1, 0, -1)
                       if self._group_need(p, m, k).status is not AllocStatus.NEVER)
            room = self.room(p, m, seqs)
            lower = f"max_tokens <= {room}" if room and room < m else "a lower max_tokens"
            raise RequestError(
                f"n={seqs} sequences of {p} prompt tokens (held once) + {said} need "
                f"{need.capacity} blocks, more than the KV cache's {total} blocks of {bs} "
                f"tokens; use n <= {fit}, {lower}, or raise --kv-cache-memory",
                "n", "n_too_large_for_pool")

    def _fitting(self, p: int, max_tokens: int, seqs: int) -> int:
        """The max_tokens to suggest when one sequence of a ``p``-token prompt cannot grow by
        ``max_tokens``: what all ``seqs`` can grow to together (one sequence's bound, which
        n > 1 would be refused again at, where that is none)."""
        mgr = self.manager
        alone = mgr.device_pool.num_blocks * mgr.block_size - p + 1
        room = self.room(p, max_tokens, seqs) if seqs > 1 else None
        return room if room and room < max_tokens else alone

    def _asked(self, p: int, params: StopParams) -> tuple[int, str] | None:
        """The tokens each sequence may grow by and how the request asked for them; None
        when it is not bounded here (one sequence, no max_tokens: it stops at the context).

        NOTE(open-n): n > 1 sequences with no max_tokens grow to the context's room together,
        so they are checked at that length: a group the pool can never hold there was
        accepted and failed part-way (finish_reason "error" after 124 tokens each)."""
        if params.max_tokens is not None:  # 0: nothing to grow (echo)
            return (params.max_tokens, f"max_tokens={params.max_tokens}") \
                if params.max_tokens else None
        if params.n == 1:
            return None
        m = self.max_model_len - p
        return m, f"no max_tokens (up to {m} tokens each, the context's room)"

    def room(self, p: int, max_tokens: int | None, seqs: int) -> int | None:
        """NOTE(fit-default): the largest max_tokens, up to ``max_tokens``, that ``seqs``
        sequences of a ``p``-token prompt can all grow to in the whole pool; ``max_tokens``
        itself where they fit, or where not even one token each does (check_pool's 400).

        vLLM runs n > 1 as n child requests scheduled apart, so a request whose children
        cannot all hold the whole context at once still runs there. Here a request's
        sequences run together, and a chat request sending n=2 and no max_tokens (the room
        the context leaves, by default) was refused as n_too_large_for_pool, naming a
        max_tokens the client never sent, on any server whose pool holds under two contexts.
        Only a default is lowered: a max_tokens the client sent is kept, or refused."""
        if not max_tokens or seqs == 1 or self._fits(p, max_tokens, seqs):
            return max_tokens
        lo, hi = 0, max_tokens  # fits(lo) (0: none), not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self._fits(p, mid, seqs) else (lo, mid)
        return lo or max_tokens

    def _fits(self, p: int, max_tokens: int, seqs: int) -> bool:
        return self._group_need(p, max_tokens, seqs).status is not AllocStatus.NEVER

    def blocks_held(self, p: int, max_tokens: int, seqs: int) -> int:
        """The most blocks ``seqs`` sequences of a ``p``-token prompt grown to ``max_tokens``
        can hold at once (prefix hits and forks only share blocks; copy-on-write replaces a
        shared block rather than adding one)."""
        return self._group_need(p, max(1, max_tokens), seqs).capacity

    def _group_need(self, p: int, max_tokens: int, seqs: int) -> Admission:
        """The admission rule, against the whole pool, for ``seqs`` sequences of this prompt
        grown to max_tokens (the last token never stored) with diverged outputs: the
        prompt's full blocks held once, as while they decode or when they are recomputed."""
        if seqs == 1 or max_tokens == 1:  # nothing generated is stored: one shared table
            return self.manager.admission([(p + max_tokens - 1, ())], watermark=False)
        return self.manager.admission([(p + max_tokens - 1, ())] * seqs, watermark=False,
                                      shared_blocks=p // self.manager.block_size)
