"""EngineCore: one synchronous engine step — schedule, copies, forward, sample, update.

Single-threaded by contract: the AsyncEngine runs it on its step thread (benchmarks and tests
may drive it directly). One ``step()``::

    out = scheduler.schedule()
    copies   swap-out, swap-in, copy-on-write: one CopyEngine batch per (kind, request), so a
             failed copy fails only its request
    wait     only for the copies touching blocks this forward reads or writes; the rest of the
             FIFO keeps running behind the compute
    forward  prefill chunks + decodes as one PagedBatch over the device KV pool
    sample   one token per sequence whose prompt is complete (n sequences share a prompt row)
    defrag   the plan's moves (full, immutable blocks) while outputs are prepared; committed by
             on_step_done once the copy is done, aborted if it failed
    update   scheduler.on_step_done, stop strings (scheduler.finish), deltas per request
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path

import torch

from kvpool.core import AllocStatus, BlockSpaceManager
from kvpool.errors import InvariantError, RequestError, SchedulerError
from kvpool.metrics import MetricsSnapshot
from kvpool.runtime.copy_engine import CopyEngine, FaultInjector
from kvpool.runtime.engine_config import EngineConfig
from kvpool.runtime.kv_storage import KVStorage
from kvpool.runtime.model import (TINY_MODEL_NAME, PagedBatch, Sampler, SamplingParams,
                                  build_tiny_model, load_model, load_tokenizer, make_generator,
                                  resolve_dtype)
from kvpool.runtime.model.dtype_policy import checkpoint_dtype, choose_dtype
from kvpool.runtime.output_processor import OutputProcessor
from kvpool.runtime.outputs import RequestOutput
from kvpool.sched import FinishedRequest, PreemptionMode, Scheduler, SchedulerConfig, SeqStatus

log = logging.getLogger(__name__)


def build_model(config: EngineConfig):
    """(model, tokenizer, served name) for the config: a local HF directory or the tiny model."""
    name, why, slow = choose_dtype(config.dtype, config.device, checkpoint_dtype(config.model))
    (log.warning if slow else log.info)("dtype %s: %s%s", name, why,
                                        " (slow here: consider --dtype auto)" if slow else "")
    dtype = resolve_dtype(name)
    if config.model is None:
        _, model, tok = build_tiny_model(config.seed, dtype, config.device)
        name = TINY_MODEL_NAME
    else:
        model = load_model(config.model, dtype, config.device)
        tok = load_tokenizer(config.model)
        name = Path(config.model).name
    return model, tok, config.served_model_name or name


class EngineCore:
    """Model + KV storage + block manager + scheduler + copy engine, stepped synchronously."""

    def __init__(self, config: EngineConfig, *, fault_injector: FaultInjector | None = None,
                 metrics=None) -> None:
        self.config = config
        self.model, self.tokenizer, self.model_name = build_model(config)
        mcfg = self.model.config
        self.max_model_len = config.max_model_len or mcfg.max_position_embeddings
        self.storage = KVStorage(mcfg, config.block_size, self.model.dtype,
                                 device=config.device, kv_cache_memory=config.kv_cache_memory,
                                 gpu_memory_utilization=config.gpu_memory_utilization,
                                 swap_space=config.swap_space,
                                 num_device_blocks=config.num_device_blocks,
                                 num_host_blocks=config.num_host_blocks)
        log.info("%s", self.storage.capacity_line(self.max_model_len))
        self.manager = BlockSpaceManager(self.storage.cache_config(
            enable_prefix_caching=config.enable_prefix_caching,
            eviction_policy=config.eviction_policy, model_id=self.model_name))
        self.scheduler = Scheduler(self.manager, SchedulerConfig(
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=max(config.max_num_batched_tokens, config.max_num_seqs),
            max_model_len=self.max_model_len, preemption_mode=config.preemption_mode,
            eos_token_id=self.tokenizer.eos_token_id,
            kv_bytes_per_block=self.storage.bytes_per_block,
            defrag_threshold=config.defrag_threshold,
            tenant_max_running_seqs=config.tenant_max_running_seqs))
        self.copies = CopyEngine.for_storage(self.storage, fault_injector=fault_injector)
        # min_tokens masks what the scheduler would stop on: its eos and stop_token_ids
        self.sampler = Sampler(torch.Generator().manual_seed(config.seed),
                               eos_token_ids=(self.tokenizer.eos_token_id,)
                               if self.tokenizer.eos_token_id is not None else ())
        self.outputs = OutputProcessor(self.tokenizer, metrics)
        self.metrics = metrics
        self._gens: dict[int, torch.Generator | None] = {}  # seq_id -> per-request generator
        # NOTE(failed-deque): request ids whose background copy (swap-out) failed. The copy
        # worker appends, the step thread pops: both are single atomic deque operations, so
        # an append racing a drain is never lost (a list swapped out could drop one).
        self._failed: deque[str] = deque()
        self.invariant_violations = 0
        # Test-only fault hook, off (None) by default: called with each request id a step
        # schedules; an exception fails that request alone, as if its part of the step raised.
        self.step_fault_hook: Callable[[str], None] | None = None
        self._prefill_rate = 0.0
        self.steps = 0
        self.prompt_tokens = 0

    # ------------------------------------------------------------------ requests
    def validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Reject what can never be served (HTTP 400 at the edge)."""
        if not prompt_ids:
            raise RequestError("the prompt is empty", "prompt")
        vocab = self.model.config.vocab_size
        bad = next((t for t in prompt_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary [0, {vocab})",
                               "prompt")
        n = len(prompt_ids)
        want = n + (params.max_tokens or 1)
        if n >= self.max_model_len or (params.max_tokens and want > self.max_model_len):
            raise RequestError(
                f"this model's maximum context length is {self.max_model_len} tokens; the "
                f"request has {n} prompt tokens and asks for {params.max_tokens} more",
                "max_tokens" if n < self.max_model_len else "prompt", "context_length_exceeded")
        adm = self.manager.admission([(n + 1, ())])  # the scheduler's own rule
        if adm.status is AllocStatus.NEVER:
            raise RequestError(f"the prompt (+1 token) {adm.reason}: shorten it or raise "
                               "--kv-cache-memory", "prompt", "prompt_too_long_for_pool")

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams, *,
                    cache_salt: str | None = None, priority: int = 0,
                    arrival: float | None = None, tenant: str | None = None) -> None:
        arrival = time.monotonic() if arrival is None else arrival
        seq_ids = self.scheduler.add_request(request_id, prompt_ids, params, priority=priority,
                                             cache_salt=cache_salt, arrival_time=arrival,
                                             tenant=tenant)
        self.outputs.add(request_id, prompt_ids, params, seq_ids, arrival)
        for i, s in enumerate(seq_ids):
            self._gens[s] = make_generator(None if params.seed is None else params.seed + i)

    def abort(self, request_id: str, reason: str = "aborted") -> RequestOutput | None:
        fr = self.scheduler.abort(request_id, reason)
        return self._finish(fr) if fr is not None else self.outputs.fail(request_id, reason)

    def has_work(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._failed)

    def _finish(self, fr: FinishedRequest, error: str | None = None) -> RequestOutput | None:
        for so in fr.seqs:
            self._gens.pop(so.seq_id, None)
        if fr.status is SeqStatus.FINISHED_IGNORED:
            error = error or fr.reason
        return self.outputs.finish(fr, time.monotonic(), error)

    # ------------------------------------------------------------------ copies
    def _submit_copies(self, out) -> list:
        """One batch per (kind, request); returns [(handle, request_id)]."""
        mgr = self.manager
        jobs = []
        owner: dict[int, str] = {}
        for p in out.preempted:
            if p.mode is PreemptionMode.SWAP:
                for s in p.seq_ids:
                    for b in mgr.get_block_table(s) if mgr.has_seq(s) else ():
                        owner[b] = p.request_id
        dev_owner: dict[int, str] = {}
        for p in out.prefills:
            for b in mgr.get_block_table(p.seq_ids[0]):
                dev_owner[b] = p.request_id
        for d in out.decodes:
            for b in mgr.get_block_table(d.seq_id):
                dev_owner[b] = d.request_id
        for kind, pairs, own, side in (("swap_out", out.blocks_to_swap_out, owner, 1),
                                       ("swap_in", out.blocks_to_swap_in, dev_owner, 1),
                                       ("cow", out.blocks_to_copy, dev_owner, 1)):
            groups: dict[str | None, list] = defaultdict(list)
            for pair in pairs:
                groups[own.get(pair[side])].append(pair)
            for rid, ps in groups.items():
                h = self.copies.submit(kind, ps, tag=rid)
                if kind == "swap_out":  # not waited for by this step: watch it
                    h.add_done_callback(self._on_background_copy)
                jobs.append((h, rid))
        return jobs

    def _on_background_copy(self, handle) -> None:
        # worker thread: only record; the step thread acts on it (single-threaded core)
        if handle.exception() is not None and handle.tag is not None:
            self.note_copy_failure(handle.tag)

    def note_copy_failure(self, request_id: str) -> None:
        """Record that a background copy of ``request_id`` failed (any thread); the next
        step fails the request."""
        self._failed.append(request_id)

    def drain_failed(self) -> list[str]:
        """Pop every recorded background-copy failure (step thread; appends may race)."""
        failed = self._failed
        out = []
        while True:
            try:
                out.append(failed.popleft())
            except IndexError:
                return out

    def _fail_requests(self, rids, reason: str) -> list[RequestOutput]:
        outs = []
        for rid in dict.fromkeys(rids):
            if rid is None:
                continue
            fr = self.scheduler.abort(rid, reason)
            o = self._finish(fr, reason) if fr is not None else self.outputs.fail(rid, reason)
            if o is not None:
                outs.append(o)
        return outs

    # ------------------------------------------------------------------ the step
    def step(self) -> list[RequestOutput]:
        """Run one engine step; returns the updates to deliver (deltas and final outputs)."""
        t0 = time.monotonic()
        results: list[RequestOutput] = []
        if self._failed:  # background copies (swap-out) that failed since the last step
            results += self._fail_requests(self.drain_failed(), "KV copy failed")
        sched, mgr = self.scheduler, self.manager
        out = sched.schedule()
        for fr in out.ignored:
            o = self._finish(fr)
            if o is not None:
                results.append(o)
        if not out.has_work:
            return results
        self.steps += 1
        jobs = self._submit_copies(out)
        tables: dict[int, list[int]] = {}
        for p in out.prefills:
            tables[p.seq_ids[0]] = mgr.get_block_table(p.seq_ids[0])
        for d in out.decodes:
            tables[d.seq_id] = mgr.get_block_table(d.seq_id)
        touched = {b for t in tables.values() for b in t}
        self.copies.wait_for_blocks(touched)
        dead = {rid for h, rid in jobs if h.done() and h.exception() is not None}
        # NOTE(late-swap-out): a swap-out that failed after the drain above may belong to a
        # request swapped back in by this very step (its host bytes are garbage). The copies
        # are FIFO, so having waited for this step's swap-ins, that failure is recorded now.
        dead.update(self.drain_failed())
        if dead:
            results += self._fail_requests(dead, "KV copy failed")
        if self.step_fault_hook is not None:
            dead |= self._injected_step_faults(out, dead, results)
        rows = [(p.token_ids, p.start, tables[p.seq_ids[0]], p) for p in out.prefills
                if p.request_id not in dead]
        rows += [([d.token_id], d.position, tables[d.seq_id], d) for d in out.decodes
                 if d.request_id not in dead]
        sampled: dict[int, int] = {}
        if rows:
            batch = PagedBatch.from_lists([r[0] for r in rows], [r[1] for r in rows],
                                          [r[2] for r in rows])
            tf = time.perf_counter()
            with torch.inference_mode():
                logits = self.model(batch, self.storage.device_kv)
            self._measure(sum(len(r[0]) for r in rows), time.perf_counter() - tf)
            sampled = self._sample(logits, rows)
        defrag_ok = True
        if out.defrag_moves:
            h = self.copies.defrag(out.defrag_moves)
            defrag_ok = h.exception(timeout=60) is None
        finished = sched.on_step_done(out, sampled, defrag_ok=defrag_ok)
        now = time.monotonic()
        self.prompt_tokens += sum(p.num_new_tokens for p in out.prefills)
        rid_of = {s: r[3].request_id for r in rows
                  for s in (r[3].seq_ids if hasattr(r[3], "seq_ids") else (r[3].seq_id,))}
        deltas, stops = self.outputs.on_tokens(
            {s: (rid_of[s], t) for s, t in sampled.items()}, now)
        for rid, seq_id, stop in stops:
            fr = sched.finish(rid, seq_id, SeqStatus.FINISHED_STOPPED, f"stop {stop!r}")
            if fr is not None:
                finished.append(fr)
        final = {}
        for fr in finished:
            o = self._finish(fr)
            if o is not None:
                final[fr.request_id] = o
        for rid, outs in deltas.items():
            if rid in final:  # merge the last deltas into the final update
                f = final[rid]
                merged = {c.index: c for c in outs}
                for c in f.outputs:
                    prev = merged.get(c.index)
                    if prev is not None:
                        c = type(c)(c.index, prev.token_ids + c.token_ids, prev.text + c.text,
                                    c.num_generated, c.finish_reason, c.stop_reason)
                    merged[c.index] = c
                final[rid] = RequestOutput(f.request_id, tuple(merged.values()), True,
                                           f.num_prompt_tokens, f.num_cached_tokens, f.error,
                                           f.metrics)
            else:
                r = self.outputs.requests.get(rid)
                results.append(RequestOutput(rid, tuple(outs), False,
                                             len(r.prompt_ids) if r else 0,
                                             self.scheduler.num_cached_tokens(rid) or 0))
        results += final.values()
        if self.metrics is not None:
            self.metrics.step.observe(time.monotonic() - t0)
        return results

    def _injected_step_faults(self, out, dead: set, results: list) -> set:
        """Test-only: run ``step_fault_hook`` per scheduled request; fail those it raises for
        (the same path as a failed copy: aborted, blocks freed, an error output)."""
        failed: set = set()
        for rid in dict.fromkeys([p.request_id for p in out.prefills]
                                 + [d.request_id for d in out.decodes]):
            if rid in dead:
                continue
            try:
                self.step_fault_hook(rid)
            except Exception as e:  # noqa: BLE001 - the injected failure of one request
                results += self._fail_requests([rid], f"engine step failed: {e}")
                failed.add(rid)
        return failed

    def _measure(self, tokens: int, seconds: float) -> None:
        """Feed the scheduler's preemption cost model with measured rates (EMA)."""
        if tokens >= 32 and seconds > 0:  # prefill-dominated steps say something about it
            rate = tokens / seconds
            self._prefill_rate = rate if not self._prefill_rate else \
                0.8 * self._prefill_rate + 0.2 * rate
        if self.steps % 32 == 0:
            bw = self.copies.bandwidth()
            kw = {}
            if bw > 0:
                kw["copy_bytes_per_s"] = bw
            if self._prefill_rate:
                kw["prefill_tokens_per_s"] = self._prefill_rate
            if kw:
                self.scheduler.update_cost_model(**kw)

    def _sample(self, logits: torch.Tensor, rows) -> dict[int, int]:
        idx, params, gens, seqs, rids = [], [], [], [], []
        reqs = self.outputs.requests
        for i, (_, _, _, item) in enumerate(rows):
            if hasattr(item, "seq_ids"):  # a prefill chunk: sample only after its last token
                if not item.is_last:
                    continue
                targets = item.seq_ids
            else:
                targets = (item.seq_id,)
            r = reqs.get(item.request_id)
            if r is None:
                continue
            for s in targets:
                idx.append(i)
                params.append(r.params)
                gens.append(self._gens.get(s))
                seqs.append(s)
                rids.append(item.request_id)
        if not idx:
            return {}
        picked = logits[torch.tensor(idx)] if len(idx) != logits.shape[0] or idx != list(
            range(len(idx))) else logits
        hist = None
        if any(p.needs_history for p in params):  # penalties / min_tokens read the tokens
            hist = [self.outputs.history(r, s) for r, s in zip(rids, seqs)]
        tokens = self.sampler(picked, params, gens, hist).tolist()
        return dict(zip(seqs, tokens))

    # ------------------------------------------------------------------ introspection
    def check_invariants(self) -> bool:
        """Full consistency check of the pools and the scheduler; counts failures."""
        try:
            self.manager.check_invariants()
            self.scheduler.check_invariants()
            return True
        except (InvariantError, SchedulerError, AssertionError) as e:
            # NOTE(invariants): the scheduler reports a break as SchedulerError; counted and
            # logged like the manager's, never raised into the step thread
            self.invariant_violations += 1
            log.error("invariant violation: %s: %s", type(e).__name__, e)
            return False

    def snapshot(self) -> MetricsSnapshot:
        """Metrics view, read without the pool lock (seqlock reads of the manager)."""
        mgr = self.manager
        st = self.scheduler.stats()
        ms = mgr.stats()
        bpb = self.storage.bytes_per_block
        copy = self.copies.stats()
        return MetricsSnapshot(
            ms, mgr.fragmentation(), 0.0,
            {"running": st.num_running, "waiting": st.num_waiting, "swapped": st.num_swapped},
            dict(st.preemptions), {"capacity": ms.device.evictions},
            {"out": ms.swap_out_blocks * bpb, "in": ms.swap_in_blocks * bpb},
            {"cow": copy.blocks.get("cow", 0), "defrag": copy.blocks.get("defrag", 0)},
            self.prompt_tokens, self.outputs.generation_tokens, self.invariant_violations)

    def close(self) -> None:
        self.copies.close(cancel=True)

