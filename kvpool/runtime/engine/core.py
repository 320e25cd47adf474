"""EngineCore: one synchronous engine step — schedule, then three stages.

Single-threaded by contract: the AsyncEngine runs it on its step thread (benchmarks and tests
may drive it directly). One ``step()``::

    out = scheduler.schedule()      entries carry their block ids; copies name their request
    _copy     swap-out, swap-in, copy-on-write: one CopyEngine batch per (kind, request), so a
              failed copy fails only its request; wait only for the copies touching blocks the
              forward reads or writes (the rest of the FIFO keeps running behind the compute;
              the swap-ins and cows are settled before on_step_done: NOTE(copy-settle))
    _forward  prefill chunks + decodes as one PagedBatch over the device KV pool, then one
              token per sequence whose prompt is complete (n sequences share a prompt row);
              grammar rows whose mask is late are deferred (row_sampler.py NOTE(late-mask))
    _deliver  defrag moves (full, immutable blocks; committed by on_step_done once copied,
              aborted if the copy failed); the output processor decides stop strings, then
              scheduler.on_step_done accepts the tokens and finishes sequences; the deltas
              (final where it reports a sequence ended) make one update per request

Before schedule(), deferred rows whose mask is ready are sampled and delivered (_deliver_late).

Faults enter only through the injected :class:`~kvpool.runtime.faults.FaultPlan`.
"""

from __future__ import annotations

import logging
import time

import torch

from kvpool.core import BlockSpaceManager
from kvpool.errors import InvariantError, RequestError, SchedulerError
from kvpool.metrics import MetricsSnapshot
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.context_fit import fit_max_model_len
from kvpool.runtime.engine.cost_meter import MIN_PREFILL_TOKENS, UPDATE_EVERY, CostMeter
from kvpool.runtime.engine.failed_copies import FailedCopies, SwapOutWatch
from kvpool.runtime.engine.model_name import build_model, cache_model_id
from kvpool.runtime.engine.output_processor import OutputProcessor, RequestOutput, Sample
from kvpool.runtime.engine.prompt_logprobs import PromptLogprobs
from kvpool.runtime.engine.row_sampler import Drawn, RowSampler
from kvpool.runtime.engine.step_copies import StepCopies
from kvpool.runtime.faults import NO_FAULTS, FaultPlan
from kvpool.runtime.kv.copy_engine import CopyEngine
from kvpool.runtime.kv.storage import KVStorage
from kvpool.runtime.model import PagedBatch, Sampler, SamplingParams
from kvpool.runtime.model.grammar_matchers import GrammarMatchers
from kvpool.sched import (FinishedRequest, RequestChecker, Scheduler, SchedulerConfig,
                          SchedulerOutput, SeqStatus)

log = logging.getLogger(__name__)


class EngineCore:
    """Model + KV storage + block manager + scheduler + copy engine, stepped synchronously."""

    def __init__(self, config: EngineConfig, *, faults: FaultPlan | None = None,
                 metrics=None, pool_observer=None) -> None:
        """``pool_observer``: the manager's PoolObserver (the KV event recorder, if any)."""
        self.config = config
        self.model, self.tokenizer, self.model_name = build_model(config)
        self.storage = KVStorage(self.model.config, config.block_size, self.model.dtype,
                                 device=config.device, kv_cache_memory=config.kv_cache_memory,
                                 gpu_memory_utilization=config.gpu_memory_utilization,
                                 swap_space=config.swap_space,
                                 num_device_blocks=config.num_device_blocks,
                                 num_host_blocks=config.num_host_blocks)
        self.num_device_blocks = self.storage.num_device_blocks
        # a derived context that outgrows the pool is capped: context_fit.py
        self.max_model_len = fit_max_model_len(
            config.max_model_len, self.model.config.context_length,
            self.num_device_blocks, config.block_size)
        log.info("%s", self.storage.capacity_line(self.max_model_len))
        self.model.rope.fit_context(self.max_model_len)  # NOTE(longrope-regime), attention.py
        if config.preemption_mode == "swap" and not self.storage.num_host_blocks:
            log.warning("--preemption-mode swap, but there is no host swap space "
                        "(--swap-space 0 or --num-host-blocks 0): every preemption will "
                        "recompute; give --swap-space GIB to swap")
        self._build_scheduler(config, pool_observer)
        # where tests and the stress harness inject failures (none by default)
        self.faults = faults if faults is not None else NO_FAULTS
        self.copies = CopyEngine.for_storage(self.storage, faults=self.faults)
        self.cost = CostMeter(self.copies, self.scheduler)  # the preemption cost model's rates
        self._build_sampling(config, metrics)
        self.metrics = metrics
        self.failed_copies = FailedCopies()  # copies that failed, by request
        self.swap_outs = SwapOutWatch()  # swap-outs not yet confirmed (NOTE(swap-out-confirm))
        self.step_copies = StepCopies(self.copies, self.failed_copies, self.swap_outs)
        self.invariant_violations = 0
        self.block_sink = None  # remote write path: .on_prefills(prefills) after each step
        self.steps = 0
        self.prompt_tokens = 0

    def _build_scheduler(self, config: EngineConfig, pool_observer) -> None:
        self.manager = BlockSpaceManager(self.storage.cache_config(
            enable_prefix_caching=config.enable_prefix_caching,
            eviction_policy=config.eviction_policy, model_id=cache_model_id(config)),
            observer=pool_observer)
        self.scheduler = Scheduler(self.manager, SchedulerConfig(
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_model_len=self.max_model_len, preemption_mode=config.preemption_mode,
            policy=config.scheduling_policy,
            eos_token_id=self.tokenizer.eos_token_id,
            other_eos_ids=self.tokenizer.eos_token_ids[1:],  # NOTE(eos-ids) in sched/sequence.py
            kv_bytes_per_block=self.storage.bytes_per_block,
            defrag_threshold=config.defrag_threshold,
            tenant_max_running_seqs=config.tenant_max_running_seqs))
        cap = config.tenant_max_running_seqs
        self.checker = RequestChecker(  # validate(): sched/request_checker.py
            self.model.config.vocab_size, self.max_model_len, self.manager,
            max_seqs=min(config.max_num_seqs, cap) if cap is not None else config.max_num_seqs)

    def _build_sampling(self, config: EngineConfig, metrics) -> None:
        self.outputs = OutputProcessor(self.tokenizer, metrics, config.stream_interval)
        # response_format: one matcher per constrained sequence; its mask goes to the sampler
        self.grammars = GrammarMatchers(self.tokenizer, self.model.config.vocab_size,
                                        before_mask=self.faults.before_mask)
        # min_tokens masks what the scheduler would stop on: its eos and stop_token_ids
        self.rows = RowSampler(Sampler(torch.Generator().manual_seed(config.seed),
                                       eos_token_ids=self.tokenizer.eos_token_ids),
                               self.outputs, self.grammars)  # NOTE(late-mask)
        self.prompt_logprobs = PromptLogprobs(self.outputs)  # prompt_logprobs.py

    # ------------------------------------------------------------------ requests
    def validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Reject what can never be served (HTTP 400 at the edge; RequestChecker)."""
        self.checker.check(prompt_ids, params)

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams, *,
                    cache_salt: str | None = None, priority: int = 0,
                    arrival: float | None = None, tenant: str | None = None) -> None:
        arrival = time.monotonic() if arrival is None else arrival
        seq_ids = self.scheduler.add_request(  # reads no cache: NOTE(prompt-logprobs)
            request_id, prompt_ids, params, priority=priority, cache_salt=cache_salt,
            arrival_time=arrival, tenant=tenant,
            skip_reading_prefix_cache=params.prompt_logprobs is not None)
        if params.response_format is not None:
            try:
                self.grammars.add(seq_ids, params.response_format)
            except RequestError:
                self.scheduler.abort(request_id, "invalid response_format")
                raise
        self.outputs.add(request_id, prompt_ids, params, seq_ids, arrival)
        self.rows.add(seq_ids, params.seed, params.think_budget)
        if params.prompt_logprobs is not None:
            self.prompt_logprobs.requests.add(request_id)

    def abort(self, request_id: str, reason: str = "aborted") -> RequestOutput | None:
        fr = self.scheduler.abort(request_id, reason)
        self.prompt_logprobs.requests.discard(request_id)
        return self._finish(fr) if fr is not None else self.outputs.fail(request_id, reason)

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """The scheduler's reset, between steps (docs/architecture.md "Development routes");
        with ``reset_running_requests`` the swap-outs still copying finish first, since the
        preempted requests' host blocks are freed and may be handed out again."""
        if reset_running_requests:
            for handle, _ in self.swap_outs.handles:
                handle.wait_done()
            self._confirm_swap_outs()
        return self.scheduler.reset_prefix_cache(reset_running_requests)

    def has_work(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self.failed_copies)

    def _finish(self, fr: FinishedRequest, error: str | None = None) -> RequestOutput | None:
        grammars = self.grammars.matchers  # empty unless some request has a response_format
        for so in fr.seqs:
            self.rows.remove(so.seq_id)
            if grammars:
                self.grammars.remove(so.seq_id)
        self.prompt_logprobs.requests.discard(fr.request_id)
        if fr.status is SeqStatus.FINISHED_IGNORED:
            error = error or fr.reason
        return self.outputs.finish(fr, time.monotonic(), error)

    def _finish_all(self, frs) -> list[RequestOutput]:
        outs = (self._finish(fr) for fr in frs)
        return [o for o in outs if o is not None]

    # ------------------------------------------------------------------ background copies
    def _fail_requests(self, rids, reason: str) -> list[RequestOutput]:
        outs = []
        for rid in dict.fromkeys(rids):
            if rid is None:
                continue
            fr = self.scheduler.abort(rid, reason)
            self.prompt_logprobs.requests.discard(rid)
            o = self._finish(fr, reason) if fr is not None else self.outputs.fail(rid, reason)
            if o is not None:
                outs.append(o)
        return outs

    # ------------------------------------------------------------------ the step
    def step(self) -> list[RequestOutput]:
        """Run one engine step; returns the updates to deliver (deltas and final outputs)."""
        t0 = time.monotonic()
        results: list[RequestOutput] = []
        if self.failed_copies:  # copies (swap-outs in the background) failed since the last step
            results += self._fail_requests(self.failed_copies.drain(), "KV copy failed")
        if self.swap_outs.handles:  # a plain step runs no code of failed_copies.py
            self._confirm_swap_outs()
        if self.rows.has_late:
            results += self._deliver_late(wait=False)
        out = self.scheduler.schedule()
        results += self._finish_all(out.ignored)
        if not out.has_work:
            if self.rows.has_late:  # nothing else can run: wait for the late masks
                results += self._deliver_late(wait=True)
            return results
        self.steps += 1
        dead = self._copy(out, results)
        entries = self._forward_entries(out, dead, results)
        results += self._deliver(out, self._forward(entries))
        if self.metrics is not None:
            self.metrics.observe_step(time.monotonic() - t0, out.num_batched_tokens,
                                      out.stats_tokens)
        return results

    def _copy(self, out: SchedulerOutput, results: list) -> set[str]:
        """Stage 1: submit the step's copies (step_copies.py) and wait for those the forward's
        blocks need. Returns the requests that failed (already aborted, their error outputs
        added to ``results``)."""
        self.step_copies.submit(out)
        # every failure recorded so far fails its request now: the copies the forward waited
        # for, and NOTE(late-swap-out): a swap-out that failed after the drain in step() may
        # belong to a request swapped back in by this very step (its host bytes are garbage);
        # the copies are FIFO, so having waited for this step's swap-ins, it is recorded now
        dead = set(self.failed_copies.drain()) if self.failed_copies else set()
        if dead:
            results += self._fail_requests(dead, "KV copy failed")
        return dead

    def _forward_entries(self, out: SchedulerOutput, dead: set[str], results: list) -> list:
        """The entries to compute: those of live requests the fault plan lets through (a
        request it raises for fails alone, like a failed copy)."""
        if self.faults is NO_FAULTS:  # the default plan injects nothing
            return [e for e in out.entries if e.request_id not in dead]
        for rid in dict.fromkeys(e.request_id for e in out.entries):
            if rid in dead:
                continue
            try:
                self.faults.on_step(rid)
            except Exception as e:  # noqa: BLE001 - the injected failure of one request
                results += self._fail_requests([rid], f"engine step failed: {e}")
                dead.add(rid)
        return [e for e in out.entries if e.request_id not in dead]

    def _forward(self, entries: list) -> Drawn:
        """Stage 2: prefill chunks + decodes as one PagedBatch over the device KV pool, then
        one token per sequence whose prompt is complete."""
        if not entries:
            return Drawn()
        batch = PagedBatch.from_lists([e.input_ids for e in entries], [e.start for e in entries],
                                      [e.block_ids for e in entries])
        full = self.prompt_logprobs.rows(entries) if self.prompt_logprobs.requests else []
        if self.grammars.matchers:  # the rows to sample (NOTE(overlap)); skipped without any
            self.grammars.prefetch_mask([s for e in entries if e.request_id in
                                         self.outputs.requests for s in e.sample_seq_ids])
        tf = time.perf_counter()
        with torch.inference_mode():
            if full:  # NOTE(prompt-logprobs): lm_head over every position of those rows only
                logits, full_logits = self.model.forward_with_prompt_logits(
                    batch, self.storage.device_kv, full)
            else:
                logits = self.model(batch, self.storage.device_kv)
        tokens = sum(len(e.input_ids) for e in entries)
        if tokens >= MIN_PREFILL_TOKENS or not self.steps % UPDATE_EVERY:  # else a no-op
            self.cost.measure(tokens, time.perf_counter() - tf, self.steps)
        if full:
            self.prompt_logprobs.record(entries, full, full_logits)
        return self.rows.sample(logits, entries, self.steps)

    def _deliver(self, out: SchedulerOutput, drawn: Drawn) -> list[RequestOutput]:
        """Stage 3: defrag copies, then the output processor (text, stop strings) and the
        scheduler (tokens, stop conditions, frees); one update per request."""
        defrag_ok = True
        if out.defrag_moves:
            h = self.copies.submit("defrag", out.defrag_moves)
            defrag_ok = h.exception(timeout=60) is None
        self.prompt_tokens += sum(p.num_new_tokens for p in out.prefills)
        broken, samples = self._drop_broken(drawn.samples)
        gone = self.step_copies.settle()  # NOTE(copy-settle): before any block is confirmed
        if gone:
            broken += self._fail_requests(gone, "KV copy failed")
            samples = [s for s in samples if s.request_id not in gone]
        stops = self._stops(self.outputs.on_tokens(samples, time.monotonic()), drawn.done)
        finished = self.scheduler.on_step_done(
            out, {s.seq_id: s.token_id for s in samples}, defrag_ok=defrag_ok, stops=stops,
            deferred=drawn.deferred, swap_outs_done=False)
        if self.swap_outs.handles:  # a plain step runs no code of failed_copies.py
            self._confirm_swap_outs()
        if self.block_sink is not None and out.prefills:
            self.block_sink.on_prefills(out.prefills)  # enqueue only (runtime/remote/writer.py)
        return broken + self._updates(finished)

    def _confirm_swap_outs(self) -> None:
        """NOTE(swap-out-confirm): the swap-outs whose copy completed are published now; one
        still running is confirmed at a later step, one that failed never."""
        for rid, step_id in self.swap_outs.completed():
            self.scheduler.swap_out_done(rid, step_id)

    def _deliver_late(self, wait: bool) -> list[RequestOutput]:
        """Between steps: the deferred rows now due (row_sampler.py NOTE(late-mask))."""
        drawn = self.rows.take_late(self.scheduler.awaiting, self.steps, wait)
        if not drawn.samples:
            return []
        broken, samples = self._drop_broken(drawn.samples)
        stops = self._stops(self.outputs.on_tokens(samples, time.monotonic()), drawn.done)
        finished = self.scheduler.accept_late({s.seq_id: s.token_id for s in samples}, stops)
        return broken + self._updates(finished)

    def _drop_broken(self, samples: list[Sample]) -> tuple[list[RequestOutput], list[Sample]]:
        """Fail the requests whose grammar broke (NOTE(grammar-error): never a stop)."""
        if not self.grammars.failures:  # NOTE(grammar-error): none broke (or none exist)
            return [], samples
        failed = self.grammars.failed_requests(samples)
        if not failed:
            return [], samples
        broken = [o for rid, why in failed.items() for o in self._fail_requests([rid], why)]
        return broken, [s for s in samples if s.request_id not in failed]

    @staticmethod
    def _stops(stops: dict, grammar_done: list[int]) -> dict[int, str]:
        return {i: f"stop {t!r}" for i, t in stops.items()} | dict.fromkeys(
            grammar_done, "grammar complete")

    def _updates(self, finished: list[FinishedRequest]) -> list[RequestOutput]:
        """One update per request: its deltas (final for each sequence the scheduler reports
        ended: NOTE(child-finish)), inside the request's final output when it finished."""
        deltas = self.outputs.on_judged(self.scheduler.ended)
        final = {fr.request_id: o for fr in finished if (o := self._finish(fr)) is not None}
        updates = []
        for rid, outs in deltas.items():
            r = self.outputs.requests.get(rid)
            delta = RequestOutput(rid, tuple(outs), False, len(r.prompt_ids) if r else 0,
                                  self.scheduler.num_cached_tokens(rid) or 0,
                                  prompt_logprobs=self.outputs.take_prompt_logprobs(rid))
            if rid in final:  # the last deltas travel inside the final update
                final[rid] = delta.then(final[rid])
            else:
                updates.append(delta)
        return updates + list(final.values())

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
            ms, mgr.stats.fragmentation(),
            {"running": st.num_running, "waiting": st.num_waiting, "swapped": st.num_swapped},
            dict(st.preemptions), {"capacity": ms.device.evictions},
            {"out": ms.swap_out_blocks * bpb, "in": ms.swap_in_blocks * bpb},
            {"cow": copy.blocks.get("cow", 0), "defrag": copy.blocks.get("defrag", 0)},
            self.prompt_tokens, self.outputs.generation_tokens, self.invariant_violations,
            sequences=st.seqs_by_state, preempted_seqs=st.preempted_seqs)

    def close(self) -> None:
        self.copies.close(cancel=True)
        self.grammars.close()

