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

RequestChecker (request_checker.py) refuses at submission what could never run, by the same
rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from kvpool.core import Admission, AllocStatus, BlockSpaceManager, SeqAlloc
from kvpool.sched.config import SchedulerConfig
from kvpool.sched.sequence import PrefillUnit, Sequence, SequenceGroup
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
