"""``python -m stress pool``: threads and coroutines hammer one BlockSpaceManager.

::

    N threads ──────── DirectRuntime ── BlockSpaceManager (one device + one host pool)
    M coroutines ─ PoolFront ─┘   ^ (fake KV: every op verifies what it touched)
    checker thread: every --check-interval s, check_all() inside manager.batch() (quiescent)
    reader thread: lock-free stats() / fragmentation() snapshots, cross-checked
    allocator threads: raw blocks through the lock-free pool.allocate() only  } NOTE(races),
    sharer threads: forks and frees over the same blocks, unbatched           } races.py
    race reader: the free list never moves without its version; quiet probe: a net-zero
      writer and the lock-free readers of a pool of its own
    monitor task: progress line, time series, stop after --duration s or --max-ops ops

Everything stops by itself: the monitor sets the stop event, every worker finishes its current
operation, frees what it owns, and the run ends with a final quiescent check: no sequence, no
used block in either pool (leaks), no violation. Threads only run defragmentation (plan, copy
outside the lock, commit or abort), so only one plan is ever in flight.

Direct calls (NOTE(direct), stress/pool/shadow.py): a ``--direct`` share of the threads'
operations (0.3 by default) are unbatched manager calls (stress/pool/direct.py), each taking
only the manager's own locks, so a mutator without its writer section races the others; their
"stats" operations then also take and give back raw device blocks (``pool.allocate_many``, or
as often the lock-free ``pool.allocate()``; ``--no-lock-free-allocate`` leaves that path out).
"""

from __future__ import annotations

import asyncio
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.core.hashing import BlockHasher
from stress.pool.direct import DirectRuntime
from stress.pool.events import CheckingObserver
from stress.pool.front import PoolFront
from stress.pool.races import QuietProbe, race_threads
from stress.pool.worker import TENANTS, Intent, PoolWorker
from stress.report import Progress, StressReport

__all__ = ["PoolConfig", "PoolStress"]

# NOTE(direct): intent -> DirectRuntime method; "stats" takes raw blocks, then reads
DIRECT_OPS = {"allocate": "allocate_direct", "append_slots": "append_slots_direct",
              "fork": "fork_direct", "free": "free_direct",
              "abort": "allocate_uncomputed_direct", "stats": "raw_blocks"}


@dataclass(frozen=True, slots=True)
class PoolConfig:
    threads: int = 4
    coroutines: int = 100
    duration: float = 10.0  # seconds of load (the drain and final checks come after)
    max_ops: int = 5_000_000  # stop earlier once this many operations ran
    blocks: int | None = None  # device blocks; default max(1024, 8 per worker)
    host_blocks: int | None = None  # default: blocks // 2
    block_size: int = 4
    seed: int = 0
    check_interval: float = 0.25  # seconds between full quiescent checks
    prefix_caching: bool = True
    verify_hits: bool = False  # check prefix hits against kept token ids
    kv_events: bool = False  # attach a checking KV-event observer (stress/pool/events.py)
    switch_interval: float = 1e-4  # sys.setswitchinterval during the run: more interleavings
    direct: float = 0.3  # share of thread operations run unbatched (NOTE(direct))
    lock_free_allocate: bool = True  # raw blocks through pool.allocate() too (NOTE(direct))
    allocators: int = 2  # threads taking raw blocks one by one only (NOTE(races), races.py)
    sharers: int = 2  # threads forking and freeing over the same blocks (NOTE(races))
    defrag: bool = True  # thread workers plan, copy and commit defragmentation
    quiet_probe: bool = True  # lock-free readers against a net-zero writer (NOTE(races))
    progress: bool = True


class PoolStress:
    """One pool-mode run; ``run()`` returns the StressReport."""

    def __init__(self, config: PoolConfig) -> None:
        if config.threads < 0 or config.coroutines < 0 or config.threads + config.coroutines < 1:
            raise ValueError("need at least one thread or coroutine")
        if min(config.allocators, config.sharers) < 0:
            raise ValueError("allocators and sharers are counts of threads: >= 0")
        if not 0 <= config.direct <= 1:
            raise ValueError(f"direct is a share in [0, 1], got {config.direct}")
        self.cfg = config
        blocks = config.blocks or max(1024, 8 * (config.threads + config.coroutines))
        host = blocks // 2 if config.host_blocks is None else config.host_blocks
        cache = CacheConfig(num_device_blocks=blocks, num_host_blocks=host,
                            block_size=config.block_size, watermark=0.01,
                            enable_prefix_caching=config.prefix_caching,
                            verify_hits=config.verify_hits)
        self.observer = CheckingObserver(BlockHasher(config.block_size, cache.model_id,
                                                     cache.hash_algo),
                                         TENANTS) if config.kv_events else None
        self.manager = BlockSpaceManager(cache, observer=self.observer)
        self.rt = DirectRuntime(self.manager, lock_free_allocate=config.lock_free_allocate)
        self.probe = QuietProbe(config.block_size) if config.quiet_probe else None
        self.direct_ops: dict[int, int] = {}  # per thread worker (each writes its own key)
        self.raw_blocks: dict[int, int] = {}  # raw device blocks taken, per thread / allocator
        self.stop = threading.Event()
        self._defrag_lock = threading.Lock()
        self.errors = 0  # unexpected exceptions from manager operations
        self.checks = 0
        self.snapshots = 0
        self.cancelled_in_flight = 0  # allocations cancelled after their batch was queued
        rng = random.Random(config.seed)
        self.thread_workers = [PoolWorker(i, rng.randrange(2**32), config.block_size,
                                          allow_defrag=config.defrag)
                               for i in range(config.threads)]
        self.coro_workers = [PoolWorker(config.threads + i, rng.randrange(2**32),
                                        config.block_size) for i in range(config.coroutines)]
        self.report = StressReport("pool", {**asdict(config), "blocks": blocks,
                                            "host_blocks": host})
        self.progress = Progress(enabled=config.progress)

    # ---------------------------------------------------------------- shared
    def _error(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        self.rt.violation(f"{where}: {type(exc).__name__}: {exc}")

    def _check_stats(self) -> None:
        """Lock-free snapshot; cross-checks between separately kept counters."""
        st = self.manager.stats()
        d, h = st.device, st.host
        bs = self.cfg.block_size
        ok = (d.version % 2 == 0 and 0 <= d.num_used <= d.num_blocks and d.num_free >= 0
              and d.num_free + d.num_evictable + d.num_used == d.num_blocks
              and st.used_slots <= (d.num_used - d.num_reserved) * bs
              and d.num_cached >= d.num_evictable
              and st.prefix_hit_tokens <= st.prefix_query_tokens
              and 0 <= st.num_swapped_seqs <= st.num_seqs
              and 0 <= h.num_used <= h.num_blocks
              and 0 <= st.internal_fragmentation < 1)
        if not ok:
            self.rt.violation(f"stats snapshot inconsistent: {st}")
        f = self.manager.stats.fragmentation()
        if not (0 <= f.external < 1 and f.num_free <= d.num_blocks):
            self.rt.violation(f"fragmentation snapshot inconsistent: {f}")
        self.snapshots += 1

    def _total_ops(self) -> int:
        return sum(w.ops for w in self.thread_workers) + sum(w.ops for w in self.coro_workers)

    # ---------------------------------------------------------------- threads
    def _run_sync(self, worker: PoolWorker, intent: Intent, direct: bool = False) -> None:
        rt, op = self.rt, intent.op
        result = None
        try:
            if direct and op in DIRECT_OPS:
                result = self._run_direct(worker, intent)
            elif op == "defrag":
                abort, pause = intent.args
                if self._defrag_lock.acquire(blocking=False):  # one plan in flight at a time
                    try:
                        rt.defrag(abort=abort, copy_pause=2e-4 if pause else 0.0)
                    finally:
                        self._defrag_lock.release()
            elif op == "abort":
                rt.allocate_uncomputed(*intent.args)
            elif op == "stats":
                self._check_stats()
            else:
                result = getattr(rt, op)(*intent.args)
        except Exception as e:  # noqa: BLE001 - a bug in the pool: count it, keep going
            self._error(f"thread {worker.wid} {op}", e)
            return
        worker.done(intent, result)

    def _run_direct(self, worker: PoolWorker, intent: Intent):
        """The intent as unbatched manager calls (NOTE(direct)); its result."""
        wid = worker.wid
        self.direct_ops[wid] = self.direct_ops.get(wid, 0) + 1
        if intent.op == "stats":
            rng = worker.rng
            n = self.rt.raw_blocks(wid, rng.randint(1, 8), rng.random() < 0.5)
            self.raw_blocks[wid] = self.raw_blocks.get(wid, 0) + n
            self._check_stats()
            return None
        return getattr(self.rt, DIRECT_OPS[intent.op])(*intent.args)

    def _thread_main(self, worker: PoolWorker) -> None:
        coin = random.Random(worker.wid)  # batched or direct: apart from the intents' rng
        share = self.cfg.direct
        try:
            while not self.stop.is_set():
                self._run_sync(worker, worker.relieve() or worker.next_intent(),
                               coin.random() < share)
            for intent in worker.release_all():
                self._run_sync(worker, intent, coin.random() < share)
        except BaseException as e:  # noqa: BLE001
            self._error(f"thread {worker.wid}", e)

    def _checker_main(self) -> None:
        while not self.stop.wait(self.cfg.check_interval):
            try:
                self.rt.check_all()
            except Exception as e:  # noqa: BLE001 - e.g. a table changed under the check
                self._error("checker", e)
            self.checks += 1

    def _reader_main(self) -> None:
        while not self.stop.wait(0.002):
            try:
                self._check_stats()
            except Exception as e:  # noqa: BLE001
                self._error("stats reader", e)

    # ---------------------------------------------------------------- coroutines
    async def _run_async(self, front: PoolFront, worker: PoolWorker,
                         intent: Intent) -> None:
        op = intent.op
        result = None
        try:
            if op == "free":
                await asyncio.gather(*(front.free(s) for s in intent.args))
            elif op == "abort":
                await self._cancelled_alloc(front, worker, *intent.args)
            elif op in ("stats", "defrag"):
                pass  # threads only: a seqlock read spins while writers are inside (it would
                # stall the event loop), and only one defrag plan may be in flight
            elif op in ("swap_out", "swap_in", "decode_step"):  # the shadow's own checks
                result = await front.call(getattr(self.rt, op), *intent.args)
            else:
                result = await getattr(front, op)(*intent.args)
        except Exception as e:  # noqa: BLE001
            self._error(f"coroutine {worker.wid} {op}", e)
            return
        worker.done(intent, result)

    async def _cancelled_alloc(self, front: PoolFront, worker: PoolWorker,
                               ids: list[int], prompt: list[int], salt: str | None) -> None:
        """A request aborted while its allocation is queued: cancel the task before it starts
        (never applied), or after one loop iteration (applied inline, or queued and maybe
        applied on a worker thread: the front must then undo it, which the final leak check
        verifies)."""
        fut = asyncio.ensure_future(front.allocate(ids, prompt, salt))  # starts next iteration
        if worker.rng.random() < 0.5:
            fut.cancel()
            return
        await asyncio.sleep(0)  # the flush runs first: inline, or handed to a worker thread
        if fut.done() and not fut.cancelled():
            if fut.result() is not None:
                worker.adopt(ids, len(prompt), salt)
            return
        fut.cancel()
        self.cancelled_in_flight += 1

    async def _coro_main(self, front: PoolFront, worker: PoolWorker) -> None:
        while not self.stop.is_set():
            await self._run_async(front, worker, worker.relieve() or worker.next_intent())
        for intent in worker.release_all():
            await self._run_async(front, worker, intent)

    # ---------------------------------------------------------------- monitor
    async def _monitor(self, t0: float) -> None:
        try:
            await self._monitor_loop(t0)
        finally:  # whatever happens here, the workers must stop
            self.stop.set()

    async def _monitor_loop(self, t0: float) -> None:
        cfg = self.cfg
        last_t, last_ops = t0, 0
        while not self.stop.is_set():
            await asyncio.sleep(0.25)
            now = time.monotonic()
            ops = self._total_ops()
            st = self.manager.stats()
            t = now - t0
            rate = (ops - last_ops) / max(now - last_t, 1e-9)
            last_t, last_ops = now, ops
            self.report.sample("usage:device", t, st.device.usage)
            self.report.sample("usage:host", t, st.host.usage)
            self.report.sample("rate:ops/s", t, rate)
            self.progress.update(
                f"pool {t:5.1f}/{cfg.duration:.0f}s ops {ops} ({rate:,.0f}/s) seqs {st.num_seqs} "
                f"dev {st.device.usage:4.0%} host {st.host.usage:4.0%} checks {self.checks} "
                f"violations {self.rt.violations}")
            if t >= cfg.duration or ops >= cfg.max_ops:
                self.stop.set()

    async def _main(self) -> None:
        executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stress-front")
        front = PoolFront(self.rt, executor=executor)  # type: ignore[arg-type]
        t0 = time.monotonic()
        threads = [threading.Thread(target=self._thread_main, args=(w,), daemon=True,
                                    name=f"stress-pool-{w.wid}") for w in self.thread_workers]
        threads += [threading.Thread(target=self._checker_main, daemon=True,
                                     name="stress-checker"),
                    threading.Thread(target=self._reader_main, daemon=True, name="stress-reader")]
        threads += race_threads(self.rt, self.probe, self.stop, self._error, self.raw_blocks,
                                first_owner=len(self.thread_workers) + len(self.coro_workers),
                                allocators=self.cfg.allocators,
                                sharers=self.cfg.sharers)  # NOTE(races)
        for t in threads:
            t.start()
        # the monitor sets the stop event (time or op budget); every coroutine then returns
        await asyncio.gather(self._monitor(t0),
                             *(self._coro_main(front, w) for w in self.coro_workers))
        loop = asyncio.get_running_loop()
        for t in threads:
            await loop.run_in_executor(None, t.join, 30.0)
            if t.is_alive():
                self.rt.violation(f"{t.name} did not stop within 30 s")
        await loop.run_in_executor(None, executor.shutdown, True)  # offloaded batches done
        self.elapsed = time.monotonic() - t0
        self.front = front

    # ---------------------------------------------------------------- run
    def run(self) -> StressReport:
        old = sys.getswitchinterval()
        sys.setswitchinterval(self.cfg.switch_interval)
        try:
            asyncio.run(self._main())
        finally:
            sys.setswitchinterval(old)
            self.progress.close()
        return self._finish()

    def _finish(self) -> StressReport:
        self._settle()
        self._work_figures(self.report)
        self._pool_figures(self.report, self.manager.stats())
        return self.report

    def _settle(self) -> None:
        """Free what no worker owns (a violation) and run the final full checks."""
        rt = self.rt
        orphans = list(rt.expected)  # every worker released what it owns: nothing may be left
        if orphans:
            rt.violation(f"{len(orphans)} sequences left without an owner (a cancelled "
                         "allocation that was applied and not undone?)")
            try:  # a broken manager may have dropped some tables already: free the rest
                rt.free(*(s for s in orphans if rt.has_seq(s)))
            except Exception as e:  # noqa: BLE001 - the report must still come out
                self._error("settle", e)
        rt.check_all()
        self._check_stats()

    def _work_figures(self, rep: StressReport) -> None:
        """What the workers did, and what the checks found."""
        workers = self.thread_workers + self.coro_workers
        ops = self._total_ops()
        counts: dict[str, int] = {}
        for w in workers:
            for k, v in w.counts.items():
                counts[k] = counts.get(k, 0) + v
        rep.set("duration_s", round(self.elapsed, 2))
        rep.set("ops", ops)
        rep.set("ops_per_s", round(ops / max(self.elapsed, 1e-9), 1))
        rep.set("op_counts", dict(sorted(counts.items())))
        rep.set("scarce_answers", sum(w.scarce for w in workers))
        rep.set("invariant_checks", self.checks + 1)
        rep.set("stats_snapshots", self.snapshots)
        rep.set("direct_ops", sum(self.direct_ops.values()))  # NOTE(direct)
        rep.set("raw_blocks_taken", sum(self.raw_blocks.values()))
        rep.set("ledger_claims", self.rt.ledger.claims)  # NOTE(races)
        rep.set("magazine_refills", self.manager.device_pool.free_list.refills)
        if self.probe is not None:
            rep.set("quiet_probe_reads", self.probe.reads)
            rep.set("quiet_probe_writes", self.probe.writes)
        rep.set("violations", self.rt.violations, must_be_zero=True)
        rep.set("errors", self.errors, must_be_zero=True)
        rep.set("violation_messages", self.rt.messages)
        obs = self.observer
        if obs is not None:  # --kv-events
            rep.set("kv_events_stored_blocks", obs.stored_blocks)
            rep.set("kv_events_host_stored_blocks", obs.host_stored_blocks)
            rep.set("kv_events_removed_blocks", obs.removed_blocks)
            rep.set("kv_event_errors", obs.errors, must_be_zero=True)
            rep.set("kv_event_error_messages", obs.messages)

    def _pool_figures(self, rep: StressReport, st) -> None:
        """The manager's state after the run (``st``: its stats), and the front's counts."""
        rt = self.rt
        rep.set("leaked_device_blocks", st.device.num_used, must_be_zero=True)
        rep.set("leaked_host_blocks", st.host.num_used, must_be_zero=True)
        rep.set("leaked_sequences", st.num_seqs, must_be_zero=True)
        rep.set("device_blocks_allocatable_after", st.device.num_allocatable)
        rep.set("prefix_hit_tokens", st.prefix_hit_tokens)
        rep.set("cow_copies", st.cow_copies)
        rep.set("swap_out_blocks", st.swap_out_blocks)
        rep.set("swap_in_blocks", st.swap_in_blocks)
        rep.set("swap_in_reused_blocks", st.swap_in_reused_blocks)
        rep.set("defrag_moves", rt.defrag_committed)
        rep.set("defrag_retries", rt.defrag_retried)
        rep.set("defrag_aborted_moves", rt.defrag_aborted)
        rep.set("evictions", st.device.evictions)
        rep.set("front_flushes", self.front.flushes)
        rep.set("front_ops", self.front.ops)
        rep.set("front_offloaded_batches", self.front.offloaded)
        rep.set("cancelled_in_flight", self.cancelled_in_flight)
        usage = rep.series.get("usage:device", [])
        rep.set("peak_device_usage", max((v for _, v in usage), default=0.0))
