"""``python -m stress http``: K concurrent clients against a real ``kvpool serve`` on 127.0.0.1.

Phases (each bounded in time)::

    start      spawn `python -m kvpool.server.serve --port 0 --invariant-check-interval N ...`
               (or use --url, or an in-process server for --faults); wait for /health
    reference  every greedy probe once, alone: the outputs the load must reproduce
    load       K clients, each one request at a time from the seeded mix, until --duration s or
               --max-requests; a sampler scrapes /metrics twice a second (usage over time)
    drain      clients stopped -> wait until /metrics shows no request and no used block
    verdict    leaked blocks, invariant violations, failures, hostile answers, greedy matches

Only loopback: the spawned server binds 127.0.0.1, and --url must point at 127.0.0.1 /
localhost (refused otherwise).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from urllib.parse import urlsplit

import aiohttp

from stress.http.big_prompt import BigPromptClients
from stress.http.health_probe import HealthProbe
from stress.http.client import Outcome, RequestRunner
from stress.http.slow_reader import SlowReaders, stream_shape
from stress.http.metrics import MetricsScrape, scrape, wait_drained
from stress.http.verdict import RunFacts, fill_verdict
from stress.report import Progress, StressReport, percentile
from stress.http.slowloris import SLOWLORIS_MUST_BE_ZERO, limit_for_serve_args, run_slowloris, \
    slowloris_figures
from stress.http.workload import Workload, WorkloadConfig

__all__ = ["HttpConfig", "HttpStress", "check_loopback"]

BIG_BODY = 4 * 1024 * 1024 + 65536  # server body limit with --big-prompts: 4 MB prompts fit
SLOW_READER_WRITE_TIMEOUT = 3.0  # seconds: short enough for several streams per reader
# bytes of SO_SNDBUF with slow readers: with the OS's autotuning (~4 MB on loopback) a whole
# stream fits the kernel buffers and the server's write timeout is never met
SLOW_READER_SEND_BUFFER = 16384
SLOW_READER_FILL_MARGIN = 15.0  # seconds: a reader's 4 x 400-token stream generated under load


def check_loopback(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"--url {url!r}: the stress harness only talks to loopback "
                         "(http://127.0.0.1:PORT)")
    return url.rstrip("/")


@dataclass(frozen=True, slots=True)
class HttpConfig:
    """The run's server and clients; what the clients send (rates, tenants, seed) is the nested
    ``workload``, whose server-dependent limits HttpStress fills in from this config."""

    url: str | None = None  # an already running server (loopback only); None: start one
    clients: int = 16
    duration: float = 30.0
    max_requests: int = 1_000_000
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)  # the mix and its seed
    api_key: str | None = None
    faults: bool = False  # in-process server + FaultDriver (copy/step faults, delays)
    fault_interval: float = 0.5  # seconds between injected faults
    # NOTE(faults): a small device pool with swap preemption and prefix caching on, so the
    # injected swap-in failures hit blocks whose hashes could outlive a failed copy
    fault_device_blocks: int = 24  # device blocks of the fault-mode server
    tenant_block_quota: int | None = None
    num_device_blocks: int = 256
    num_host_blocks: int = 512
    max_num_seqs: int = 64
    max_model_len: int = 512
    max_body_bytes: int = 1 << 20
    invariant_check_interval: int = 4
    server_args: tuple[str, ...] = ()  # extra `kvpool serve` flags for the spawned server
    drain_timeout: float = 30.0
    request_timeout: float = 120.0
    progress: bool = True
    slowloris: int = 0  # raw connections that trickle a head and never finish it (slowloris.py)
    # issue 12 items 3/4: extra client kinds beside the mix, and the /health bound
    slow_readers: int = 0  # raw-socket streams that never read (stress/http/slow_reader.py)
    big_prompts: int = 0  # clients sending 4 MB / 2M-id prompts (stress/http/big_prompt.py)
    health_p99_ms: float = 50.0  # the run fails when /health p99 is above this
    health_interval: float = 0.05  # seconds between /health samples
    stream_write_timeout: float | None = None  # server flag; None: 3 s with slow readers

    @property
    def seed(self) -> int:
        """One seed for the run: the workload's (server, client streams, fault driver)."""
        return self.workload.seed


class HttpStress:
    """One HTTP-mode run; ``run()`` returns the StressReport."""

    def __init__(self, config: HttpConfig) -> None:
        if config.clients < 1:
            raise ValueError("--clients must be >= 1")
        if config.slowloris < 0:
            raise ValueError("--slowloris must be >= 0")
        if config.slow_readers < 0 or config.big_prompts < 0:
            raise ValueError("--slow-readers and --big-prompts count clients: use N >= 0")
        if config.url is not None:
            config = replace(config, url=check_loopback(config.url))
            if config.faults:
                raise ValueError("--faults needs the in-process server: drop --url")
        if config.big_prompts and config.url is None and config.max_body_bytes < BIG_BODY:
            # the 4 MB prompts must reach the parser, not the 413 check
            config = replace(config, max_body_bytes=BIG_BODY)
        self.cfg = config
        # the server's limits, as this run starts it (an external server: kvpool's defaults)
        self.workload = Workload(replace(
            config.workload,
            max_body_bytes=config.max_body_bytes if config.url is None else 4 * 1024 * 1024,
            max_prompt_chars=min(400, config.max_model_len - 110)))
        self.report = StressReport("http", asdict(config))
        self.progress = Progress(enabled=config.progress)
        self.outcomes: list[Outcome] = []
        self.reference: dict[int, Outcome] = {}
        self.server = None
        self.faults = None
        self.issued = 0
        self.post_hostile = Counter()
        self.slow: SlowReaders | None = None
        self.big: BigPromptClients | None = None

    # ---------------------------------------------------------------- server
    def _engine_config(self):
        from kvpool.runtime.engine.config import EngineConfig

        c = self.cfg
        extra = {}
        if c.faults:
            extra = dict(num_device_blocks=c.fault_device_blocks, preemption_mode="swap",
                         enable_prefix_caching=True)
        return EngineConfig(**{**dict(num_device_blocks=c.num_device_blocks,
                                      num_host_blocks=c.num_host_blocks,
                                      max_num_seqs=c.max_num_seqs,
                                      max_model_len=c.max_model_len, seed=c.seed,
                                      max_queue=4096), **extra})

    def _write_timeout(self) -> float | None:
        """The server's --stream-write-timeout: short with slow readers, so each reader's
        streams meet it several times in one run; else the server's default."""
        c = self.cfg
        if c.stream_write_timeout is not None:
            return c.stream_write_timeout
        return SLOW_READER_WRITE_TIMEOUT if c.slow_readers else None

    def _start_server(self) -> str:
        from stress.http.servers import InProcessServer, SpawnedServer

        c = self.cfg
        if c.url is not None:
            return c.url
        if c.faults:
            from stress.faults import FaultDriver, InjectedFaults

            plan = InjectedFaults()
            self.server = InProcessServer(
                self._engine_config(), api_key=c.api_key, max_body_bytes=c.max_body_bytes,
                tenant_block_quota=c.tenant_block_quota,
                invariant_check_interval=c.invariant_check_interval,
                faults=plan, stream_write_timeout=self._write_timeout())
            url = self.server.start()
            self.faults = FaultDriver(plan, seed=c.seed)
            return url
        args = ["--num-device-blocks", str(c.num_device_blocks),
                "--num-host-blocks", str(c.num_host_blocks),
                "--max-num-seqs", str(c.max_num_seqs), "--max-model-len", str(c.max_model_len),
                "--max-queue", "4096", "--seed", str(c.seed),
                "--max-body-bytes", str(c.max_body_bytes),
                "--invariant-check-interval", str(c.invariant_check_interval),
                "--log-level", "warning"]
        if c.tenant_block_quota:
            args += ["--tenant-block-quota", str(c.tenant_block_quota)]
        if c.api_key:
            args += ["--api-key", c.api_key]
        if self._write_timeout() is not None:
            args += ["--stream-write-timeout", str(self._write_timeout())]
        if c.slow_readers:
            args += ["--socket-send-buffer", str(SLOW_READER_SEND_BUFFER)]
        self.server = SpawnedServer(args + list(c.server_args))
        return self.server.start()

    def _stop_server(self) -> None:
        from stress.http.servers import SpawnedServer

        if self.server is None:
            return
        if isinstance(self.server, SpawnedServer):
            code = self.server.stop()
            self.report.set("server_exit_code", code, must_be_zero=True)
        else:
            if self.faults is not None:
                self.faults.clear()
            self.server.stop()

    # ---------------------------------------------------------------- run
    def run(self) -> StressReport:
        try:
            url = self._start_server()
            asyncio.run(self._main(url))
        finally:
            self.progress.close()
            self._stop_server()
        return self.report

    async def _main(self, url: str) -> None:
        c = self.cfg
        conn = aiohttp.TCPConnector(limit=c.clients + 8, force_close=False)
        async with aiohttp.ClientSession(connector=conn) as session:
            await self._wait_healthy(session, url)
            probe = HealthProbe(url, interval=c.health_interval, p99_bound_ms=c.health_p99_ms)
            probe.start()  # the whole run: reference, load and drain
            try:
                await self._load(session, url, probe)
            finally:
                probe.stop()

    async def _load(self, session: aiohttp.ClientSession, url: str, probe: HealthProbe) -> None:
        c = self.cfg
        runner = RequestRunner(session, url, api_key=c.api_key, timeout=c.request_timeout,
                               fault_mode=c.faults)
        await self._reference(runner)
        m0 = await scrape(session, url)
        t0 = time.monotonic()
        stop = asyncio.Event()
        sampler = asyncio.create_task(self._sampler(session, url, t0, stop))
        injector = asyncio.create_task(self._inject(stop)) if self.faults else None
        loris = (asyncio.create_task(run_slowloris(url, c.slowloris, limit=self._loris_limit()))
                 if c.slowloris else None)
        rng = random.Random(c.seed + 1)
        clients = [self._client(runner, random.Random(rng.randrange(2**32)), t0, stop)
                   for _ in range(c.clients)]
        extra = self._extra_clients(url, stop, t0 + c.duration)
        await asyncio.gather(*clients, *extra)
        load_s = time.monotonic() - t0
        stop.set()
        await sampler
        if injector is not None:
            await injector
            self.faults.clear()
        if loris is not None:  # each ends by the server's close or by its limit
            self._loris_figures(await loris)
        try:
            m1, drain_s = await wait_drained(session, url, c.drain_timeout)
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError) as e:
            m1, drain_s = None, float("nan")  # the server died: every figure fails
            self.report.note(f"/metrics unreachable after the load: {e!r}")
        healthy = await self._healthy(session, url)
        probe.stop()
        self._verdict(m0, m1, load_s, drain_s, healthy)
        self._extra_verdict(probe)

    def _extra_clients(self, url: str, stop: asyncio.Event, deadline: float) -> list:
        """The slow readers and big-prompt clients (each kind its own module)."""
        c = self.cfg
        out = []
        if c.slow_readers:
            # the hold outlasts generating the whole stream under load, then the write timeout:
            # by then the server's writes have blocked and it must have closed the stream
            hold = (self._write_timeout() or 30.0) + SLOW_READER_FILL_MARGIN
            blocks = c.fault_device_blocks if c.faults else c.num_device_blocks
            n, max_tokens = (4, 400) if c.url is not None else stream_shape(  # NOTE(fit)
                c.max_num_seqs, min(blocks, c.tenant_block_quota or blocks), c.max_model_len)
            self.slow = SlowReaders(url, c.slow_readers, hold=hold, api_key=c.api_key,
                                    n_choices=n, max_tokens=max_tokens)
            out.append(self.slow.run(stop, deadline))
        if c.big_prompts:
            limit = c.max_body_bytes if c.url is None else 4 * 1024 * 1024
            self.big = BigPromptClients(url, c.big_prompts, limit, api_key=c.api_key)
            out.append(self.big.run(stop, deadline))
        return out

    def _extra_verdict(self, probe: HealthProbe) -> None:
        rep = self.report
        for k, v in probe.figures().items():
            rep.set(k, v, must_be_zero=k == "health_p99_over_bound")
        if self.slow is not None:
            for k, v in self.slow.figures().items():
                rep.set(k, v, must_be_zero=k == "slow_reader_errors")
        if self.big is not None:
            for k, v in self.big.figures().items():
                rep.set(k, v, must_be_zero=k == "big_prompt_failures")

    async def _wait_healthy(self, session: aiohttp.ClientSession, url: str,
                            timeout: float = 60.0) -> None:
        t0 = time.monotonic()
        while not await self._healthy(session, url):
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"{url}/health not 200 within {timeout}s")
            await asyncio.sleep(0.2)

    @staticmethod
    async def _healthy(session: aiohttp.ClientSession, url: str) -> bool:
        try:
            async with session.get(url + "/health",
                                   timeout=aiohttp.ClientTimeout(total=5)) as r:
                return r.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    async def _reference(self, runner: RequestRunner) -> None:
        """Each greedy probe once, alone (nothing else in flight)."""
        for i in range(len(self.workload.probes)):
            self.reference[i] = await runner.execute(self.workload.probe_spec(i))
        bad = [i for i, o in self.reference.items() if o.category != "ok"]
        self.report.set("reference_failures", len(bad), must_be_zero=True)
        if bad:
            self.report.note(f"reference run failed for probes {bad}: "
                             f"{self.reference[bad[0]].detail}")

    async def _client(self, runner: RequestRunner, rng: random.Random, t0: float,
                      stop: asyncio.Event) -> None:
        c = self.cfg
        after_hostile = False
        while (not stop.is_set() and self.issued < c.max_requests
               and time.monotonic() - t0 < c.duration):
            self.issued += 1
            spec = self.workload.next(rng, allow_hostile=not after_hostile,
                                      allow_disconnect=not after_hostile)
            out = await runner.execute(spec)
            out.done_at -= t0
            self.outcomes.append(out)
            if after_hostile:  # the server must still serve after a hostile request
                self.post_hostile["ok" if out.category in ("ok", "busy", "fault")
                                  else "failed"] += 1
            after_hostile = spec.kind == "hostile"
            if out.category == "failed" and out.status is None:
                await asyncio.sleep(0.05)  # connection refused / reset: do not spin

    async def _sampler(self, session: aiohttp.ClientSession, url: str, t0: float,
                       stop: asyncio.Event) -> None:
        rep = self.report
        last = 0.0
        while not stop.is_set():
            t = time.monotonic() - t0
            if t - last >= 0.5:
                last = t
                try:
                    m = await scrape(session, url, timeout=5)
                    rep.sample("usage:device", t, m.usage("device"))
                    rep.sample("usage:host", t, m.usage("host"))
                    rep.sample("count:requests in flight", t, m.requests_in_flight())
                except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError):
                    pass
            self._show_progress(t)
            try:
                await asyncio.wait_for(stop.wait(), 0.25)
            except asyncio.TimeoutError:
                pass

    async def _inject(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.cfg.fault_interval)
            except asyncio.TimeoutError:
                self.faults.inject_one()

    def _show_progress(self, t: float) -> None:
        cats = Counter(o.category for o in self.outcomes)
        lat = [o.latency for o in self.outcomes[-2000:] if o.category == "ok"]
        p99 = percentile(lat, 99)
        usage = self.report.series.get("usage:device") or [(0, 0.0)]
        self.progress.update(
            f"http {t:5.1f}/{self.cfg.duration:.0f}s sent {self.issued} ok {cats['ok']} "
            f"failed {cats['failed']} hostile {cats['hostile_ok']}/"
            f"{cats['hostile_ok'] + cats['hostile_bad']} drop {cats['disconnected']} "
            f"busy {cats['busy']} p99 {p99 * 1000 if p99 else 0:.0f}ms "
            f"dev {usage[-1][1]:4.0%}")

    # ---------------------------------------------------------------- slowloris
    def _loris_limit(self) -> float:
        """A slowloris open longer than this fails the run (slowloris.limit_for_serve_args)."""
        return limit_for_serve_args(self.cfg.server_args if self.cfg.url is None else ())

    def _loris_figures(self, results) -> None:
        rep = self.report
        for k, v in slowloris_figures(results, self._loris_limit()).items():
            rep.set(k, v, must_be_zero=k in SLOWLORIS_MUST_BE_ZERO)
        if self.cfg.url is not None:
            rep.note("external server: the slowloris limit assumes kvpool serve's default "
                     "--header-timeout / --keep-alive-timeout")

    # ---------------------------------------------------------------- verdict
    def _verdict(self, m0: MetricsScrape, m1: MetricsScrape | None, load_s: float,
                 drain_s: float, healthy: bool) -> None:
        fill_verdict(self.report, self.outcomes, self.reference, m0, m1,
                     RunFacts(load_s, drain_s, healthy, self.post_hostile["failed"],
                              external=self.cfg.url is not None,
                              slowloris=bool(self.cfg.slowloris)),
                     self.faults)
