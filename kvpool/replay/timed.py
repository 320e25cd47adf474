"""Timed replay: a deterministic discrete-event run of a trace through the real Scheduler and
BlockSpaceManager, with a cost model standing in for the model's compute.

Event loop (simulated clock ``t`` in seconds, from the first arrival)::

    add every request with arrival <= t
    nothing unfinished      -> t = next arrival
    out = schedule(now=t)   -> nothing to run: t = next arrival (never stalls otherwise)
    t += step_seconds(out)
    on_step_done(out, sampled tokens, now=t)

    step_seconds = step_overhead_s
                 + prefill tokens / prefill_tokens_per_s
                 + decodes * decode_s_per_seq
                 + (swap + copy-on-write + defrag blocks) * kv_bytes_per_block / copy_bytes_per_s

Sampled tokens come from ``random.Random(seed)`` and never stop a request (eos is ignored):
each request generates exactly ``output_length`` tokens (at least 1). The same trace, options
and seed give the same report, byte for byte.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, ManagerStats
from kvpool.replay.report import Timeline, dist
from kvpool.replay.trace import TokenSynth, TraceRequest
from kvpool.sched.admission_gate import exceeds_context
from kvpool.sched.config import SchedulerConfig
from kvpool.sched.output import FinishedRequest, SchedulerOutput
from kvpool.sched.scheduler import Scheduler
from kvpool.sched.sequence import RequestParams, SeqStatus

DEFAULT_NUM_BLOCKS = 32768  # device pool blocks of 16 tokens: 512k tokens, 64 GiB of KV (8B)


def all_admissions_hit_rate(st: ManagerStats) -> float:
    """Prefix-cache hit tokens over queried tokens of every allocation: first admissions and
    re-admissions after a recompute preemption, which the manager counts apart
    (NOTE(preempted-queries) in kvpool/core/block_table.py)."""
    queried = st.prefix_query_tokens + st.preempted_query_tokens
    return (st.prefix_hit_tokens + st.preempted_hit_tokens) / queried if queried else 0.0


# the replay flag that sets each StepCost field (kv_bytes_per_block: per token x block size)
_COST_FLAGS = {"step_overhead_s": "--step-overhead-s",
               "prefill_tokens_per_s": "--prefill-tokens-per-s",
               "decode_s_per_seq": "--decode-s-per-seq", "copy_bytes_per_s": "--copy-gbps",
               "kv_bytes_per_block": "--kv-bytes-per-token x --block-size"}
_POSITIVE = ("prefill_tokens_per_s", "copy_bytes_per_s", "kv_bytes_per_block")


@dataclass(frozen=True, slots=True)
class StepCost:
    """The simulated engine. Defaults: roughly an 8B Llama on one H200-class GPU."""

    step_overhead_s: float = 0.004  # fixed cost of one forward (launches, sampling)
    prefill_tokens_per_s: float = 40_000.0  # prompt tokens computed per second
    decode_s_per_seq: float = 0.0001  # extra seconds per decoding sequence in a step
    kv_bytes_per_block: int = 2 * 1024 * 1024  # KV bytes of one 16-token block, all layers
    copy_bytes_per_s: float = 25e9  # host<->device and device copy bandwidth

    def __post_init__(self) -> None:
        # NOTE(finite-clock): inf passed ">= 0" too: makespan inf, TTFT nan, a report of NaNs
        for name, flag in _COST_FLAGS.items():
            v = getattr(self, name)
            low = v > 0 if name in _POSITIVE else v >= 0
            if not (low and math.isfinite(v)):
                raise ValueError(f"{flag} must be {'> 0' if name in _POSITIVE else '>= 0'} and "
                                 f"finite, got cost model {name}={v!r}")

    def seconds(self, out: SchedulerOutput) -> float:
        prefill = sum(p.end - p.start for p in out.prefills)
        blocks = (len(out.blocks_to_swap_in) + len(out.blocks_to_swap_out)
                  + len(out.blocks_to_copy) + len(out.defrag_moves))
        return (self.step_overhead_s + prefill / self.prefill_tokens_per_s
                + len(out.decodes) * self.decode_s_per_seq
                + blocks * self.kv_bytes_per_block / self.copy_bytes_per_s)


@dataclass(frozen=True, slots=True)
class TimedOptions:
    """Pool, scheduler and replay options (the CLI flags)."""

    block_size: int = 16  # tokens per pool block
    num_blocks: int = DEFAULT_NUM_BLOCKS  # device pool blocks
    num_host_blocks: int = 8192  # host swap pool blocks (0 disables swapping)
    max_num_seqs: int = 256  # scheduler budget
    max_num_batched_tokens: int = 8192  # scheduler budget (chunked prefill)
    max_model_len: int = 131072  # longer prompts are ignored (reported)
    policy: str = "lru"  # eviction policy of the device prefix cache
    preemption_mode: str | None = None  # None: by cost
    watermark: float = 0.01  # admission watermark (fraction of device blocks)
    seed: int = 0  # token synthesis and sampling
    defrag_threshold: float | None = None  # scheduler defrag trigger
    arrival_scale: float = 1.0  # multiplies the trace's arrival offsets (2: half the rate)
    trace_block: int = 512  # tokens per trace hash id (the trace format's, trace.read_trace)


@dataclass(slots=True)
class Outcomes:
    """What the report counts of the requests that left the scheduler, and nothing more: a
    FinishedRequest holds its output token ids (36 bytes a generated token, kept only to be
    counted; NOTE(bounded-timeline) in report.py). Invariant: ``ttft``, ``queue`` and
    ``e2e`` have one value per served request."""

    ttft: list[float] = field(default_factory=list)  # served requests: first token - arrival
    queue: list[float] = field(default_factory=list)  # first scheduled - arrival
    e2e: list[float] = field(default_factory=list)  # finished - arrival
    ignored: int = 0  # requests ignored (never served)
    reasons: set = field(default_factory=set)  # why they were ignored
    output_tokens: int = 0  # tokens the served requests generated
    prompt_tokens: int = 0  # their prompt tokens
    cached_tokens: int = 0  # of which the prefix cache served at first admission

    @property
    def count(self) -> int:
        """Requests that left the scheduler so far."""
        return len(self.ttft) + self.ignored

    def add(self, finished: list[FinishedRequest]) -> None:
        for f in finished:
            # by status: a request ignored after it generated tokens (prompt + output outgrew
            # the whole pool) has a first token, yet it was not served (its output not counted)
            if f.status is SeqStatus.FINISHED_IGNORED:
                self.ignored += 1
                self.reasons.add(f.reason)
                continue
            self.ttft.append(f.first_token_time - f.arrival_time)
            self.queue.append(f.first_scheduled_time - f.arrival_time)
            self.e2e.append(f.finished_time - f.arrival_time)
            self.output_tokens += sum(len(s.output_token_ids) for s in f.seqs)
            self.prompt_tokens += f.num_prompt_tokens
            self.cached_tokens += f.num_cached_tokens


class TimedReplay:
    """One timed replay. Invariant: ``t`` never decreases; after ``run`` the manager holds no
    sequence and passes ``check_invariants``."""

    def __init__(self, opts: TimedOptions, cost: StepCost | None = None) -> None:
        for flag, v, low in (("--block-size", opts.block_size, 1),
                             ("--num-blocks", opts.num_blocks, 1),
                             ("--num-host-blocks", opts.num_host_blocks, 0)):
            if v < low:  # CacheConfig's own message names serve's flags
                raise ValueError(f"{flag} must be >= {low}, got {v}")
        if not (opts.arrival_scale > 0 and math.isfinite(opts.arrival_scale)):
            # NOTE(finite-clock): inf passed "> 0", and 0 x inf made every arrival NaN
            raise ValueError(f"--arrival-scale must be > 0 and finite, got "
                             f"{opts.arrival_scale!r}")
        self.opts = opts  # options
        self.cost = cost if cost is not None else StepCost(
            kv_bytes_per_block=2 * 1024 * 1024 // 16 * opts.block_size)  # engine model
        self.manager = BlockSpaceManager(CacheConfig(
            num_device_blocks=opts.num_blocks, block_size=opts.block_size,
            num_host_blocks=opts.num_host_blocks, watermark=opts.watermark,
            eviction_policy=opts.policy))
        self.scheduler = Scheduler(self.manager, SchedulerConfig(
            max_num_seqs=opts.max_num_seqs, max_num_batched_tokens=opts.max_num_batched_tokens,
            max_model_len=opts.max_model_len, preemption_mode=opts.preemption_mode,
            kv_bytes_per_block=self.cost.kv_bytes_per_block,
            copy_bytes_per_s=self.cost.copy_bytes_per_s,
            prefill_tokens_per_s=self.cost.prefill_tokens_per_s,
            defrag_threshold=opts.defrag_threshold), clock=lambda: self.t)
        self.synth = TokenSynth(seed=opts.seed, block=opts.trace_block)  # prompt token ids
        self.rng = random.Random(opts.seed)  # sampled token ids
        self.t = 0.0  # simulated seconds since the first arrival
        self.timeline = Timeline()  # a point per step, bounded: NOTE(bounded-timeline)
        self.outcomes = Outcomes()  # what the report counts of the requests that left

    def run(self, reqs: list[TraceRequest],
            progress: Callable[[int, str], None] | None = None) -> dict:
        sched, mgr = self.scheduler, self.manager
        arrive = self.arrivals(reqs)  # simulated arrival offsets
        left = self.outcomes
        steps = peak_used = tokens_sched = 0
        i, n = 0, len(reqs)
        while i < n or sched.has_unfinished():
            i = self._admit(reqs, arrive, i)
            if not sched.has_unfinished():
                self.t = arrive[i]
                continue
            out = sched.schedule(now=self.t)
            left.add(out.ignored)
            if not out.has_work:
                self._idle(out, arrive, i)
                continue
            self.t += self.cost.seconds(out)
            left.add(sched.on_step_done(out, self._sampled(out), now=self.t))
            steps += 1
            tokens_sched += out.num_batched_tokens
            peak_used = max(peak_used, self._record())
            if progress is not None:
                progress(left.count, f"t={self.t:8.1f}s")
        mgr.check_invariants()
        if mgr.seq_ids():
            raise RuntimeError("replay leaked block tables")
        return self._report(reqs, left, steps, peak_used, tokens_sched)

    def arrivals(self, reqs: list[TraceRequest]) -> list[float]:
        """The simulated arrival offsets of ``reqs`` (seconds from the first, times
        ``arrival_scale``). NOTE(finite-clock): ValueError unless they are finite and never go
        back (read_trace sorts them, NOTE(time-order) in trace.py): the loop admits requests in
        list order while ``arrive <= t``, so a NaN arrival stopped the clock (100 % CPU, no
        end) and one that went back was queued from a time long past."""
        t0 = reqs[0].arrival_s if reqs else 0.0
        arrive = [(r.arrival_s - t0) * self.opts.arrival_scale for r in reqs]
        bad = next((i for i, a in enumerate(arrive) if not math.isfinite(a)), None)
        if bad is not None:
            raise ValueError(f"request {bad}: arrival offset {arrive[bad]} s (trace "
                             f"arrival x --arrival-scale) is not a finite number")
        back = next((i for i in range(1, len(arrive)) if arrive[i] < arrive[i - 1]), None)
        if back is not None:
            raise ValueError(f"request {back} arrives before request {back - 1}: requests "
                             "must come in arrival order")
        return arrive

    def _admit(self, reqs: list[TraceRequest], arrive: list[float], i: int) -> int:
        """Add the requests from ``reqs[i]`` on that have arrived by ``t``; returns the index
        of the first one still to come."""
        while i < len(reqs) and arrive[i] <= self.t:
            r = reqs[i]
            self.scheduler.add_request(str(r.index), self._prompt(r),
                                       RequestParams(max_tokens=max(1, r.output_length),
                                                     ignore_eos=True),
                                       arrival_time=arrive[i])
            i += 1
        return i

    def _prompt(self, r: TraceRequest) -> list[int]:
        """The prompt's token ids. NOTE(no-synth-past-context): a prompt past max_model_len is
        only reported as ignored, never hashed, so its length is all the scheduler reads: no
        ids are made for it (10M tokens took 580 MB of synthesised ids to be ignored)."""
        if exceeds_context(r.input_length, 0, self.opts.max_model_len):
            return [0] * r.input_length
        return self.synth.prompt(r)

    def _idle(self, out: SchedulerOutput, arrive: list[float], i: int) -> None:
        """A step with nothing to run: schedule again at once if it changed the state, else
        wait for the next arrival (none left is a stall)."""
        if out.preempted or out.ignored or not self.scheduler.has_unfinished():
            return  # state changed (a lone request preempted itself...): again
        if i >= len(arrive):
            raise RuntimeError("replay stalled: unfinished requests but nothing schedulable "
                               f"at t={self.t:.3f}s ({self.scheduler.num_requests()})")
        self.t = max(self.t, arrive[i])

    def _sampled(self, out: SchedulerOutput) -> dict:
        """A random token for every decode and for every sequence whose prefill ends."""
        vocab, rand = self.synth.vocab_size, self.rng.randrange
        sampled = {i: rand(vocab) for i in out.decodes.seq_ids}
        for p in out.prefills:
            if p.is_last:
                for s in p.seq_ids:
                    sampled[s] = rand(vocab)
        return sampled

    def _record(self) -> int:
        """The step's point on the timeline; returns the device blocks in use."""
        mgr = self.manager
        used = mgr.device_pool.stats().num_used
        st = mgr.stats()
        q = self.scheduler.num_requests()
        self.timeline.add(self.t, all_admissions_hit_rate(st), used / mgr.device_pool.num_blocks,
                          q["waiting"], q["running"], q["swapped"])
        return used

    def _report(self, reqs, left: Outcomes, steps, peak_used, tokens_sched) -> dict:
        ss, ms = self.scheduler.stats(), self.manager.stats()
        makespan, out_tokens, prompt = self.t, left.output_tokens, left.prompt_tokens
        done = len(left.ttft)
        return {
            "mode": "timed", "options": asdict(self.opts), "cost_model": asdict(self.cost),
            "requests": len(reqs), "completed": done, "ignored": left.ignored,
            "ignored_reasons": sorted(left.reasons),
            "steps": steps, "makespan_s": round(makespan, 6),
            "ttft_s": dist(left.ttft), "queueing_s": dist(left.queue), "e2e_s": dist(left.e2e),
            "throughput": {
                "output_tokens_per_s": round(out_tokens / makespan, 3) if makespan else None,
                "prompt_tokens_per_s": round(prompt / makespan, 3) if makespan else None,
                "requests_per_s": round(done / makespan, 6) if makespan else None,
                "batched_tokens_per_step": round(tokens_sched / steps, 3) if steps else None},
            "prefix_hit_rate": round(left.cached_tokens / prompt, 6) if prompt else 0.0,
            "prefix_hit_rate_all_admissions": round(all_admissions_hit_rate(ms), 6),
            "preemptions": ss.preemptions,
            "swap_out_blocks": ss.swap_out_blocks, "swap_in_blocks": ss.swap_in_blocks,
            "swap_in_reused_blocks": ms.swap_in_reused_blocks, "cow_blocks": ss.cow_blocks,
            "evictions": ms.device.evictions,
            "peak_usage": round(peak_used / self.manager.device_pool.num_blocks, 6),
            "peak_used_blocks": peak_used,
            "defrag": {"plans": ss.defrag_plans, "moves": ss.defrag_moves,
                       "retried": ss.defrag_retried},
            "timeline": self.timeline.downsample(),
        }
