"""The HTTP stress run's verdict: outcomes and two /metrics scrapes -> report figures.

``fill_verdict`` sets every figure of the run's main load and marks which must be zero or
true; what the extra client kinds (slow readers, big prompts, slowloris, /health) found is
added by the run itself. A must-be-zero figure that could not be read (the server's /metrics
gone after the load) is None, which fails it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from stress.http.client import Outcome
from stress.http.metrics import MetricsScrape
from stress.report import StressReport, percentile

__all__ = ["RunFacts", "fill_verdict", "greedy"]


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the run measured besides the outcomes and scrapes."""

    load_s: float  # seconds the load ran
    drain_s: float  # seconds until nothing was in flight (nan: /metrics unreachable)
    healthy: bool  # /health answered after the drain
    post_hostile_failed: int  # normal requests that failed right after a hostile one
    external: bool = False  # --url: a server this run did not start
    slowloris: bool = False  # slowloris connections ran


def greedy(outcomes: list[Outcome], reference: dict[int, Outcome]
           ) -> tuple[int, int, list[str]]:
    """(checked, mismatched, up to 5 details): greedy probes against their reference run."""
    checked = mismatched = 0
    details: list[str] = []
    for o in outcomes:
        if o.spec.probe is None or o.category != "ok":
            continue
        ref = reference.get(o.spec.probe)
        if ref is None or ref.category != "ok":
            continue
        checked += 1
        if o.texts != ref.texts or o.completion_tokens != ref.completion_tokens:
            mismatched += 1
            if len(details) < 5:
                details.append(f"probe {o.spec.probe} stream={o.spec.stream} tenant="
                               f"{o.spec.tenant}: {o.texts!r} != {ref.texts!r}")
    return checked, mismatched, details


def fill_verdict(rep: StressReport, outs: list[Outcome], reference: dict[int, Outcome],
                 m0: MetricsScrape, m1: MetricsScrape | None, run: RunFacts,
                 faults: Any = None) -> None:
    """Set the load's figures on ``rep`` (``faults``: the FaultDriver, when faults ran)."""
    reachable = m1 is not None
    rep.set("server_reachable_after", reachable, must_be_true=True)
    m1 = m1 if m1 is not None else m0
    missing = sorted(set(m0.missing()) | set(m1.missing()))
    rep.set("engine_series_missing", len(missing), must_be_zero=True)  # NOTE(absent)
    if missing:
        rep.note(f"/metrics lacks {', '.join(missing)}: the leak and drain figures below "
                 "cannot be read from this server (a router? use each replica's /metrics)")
    _outcome_figures(rep, outs, run)
    _engine_figures(rep, m0, m1, run)
    _leak_figures(rep, m1 if reachable else None)
    if run.external:
        rep.note("external server: invariant checks run only if it was started with "
                 "--invariant-check-interval N")
    checked, mismatched, details = greedy(outs, reference)
    rep.set("greedy_checked", checked)
    rep.set("greedy_mismatches", mismatched, must_be_zero=True)
    rep.set("greedy_mismatch_details", details)
    rep.set("greedy_all_matched", mismatched == 0, must_be_true=True)
    rep.set("server_healthy_after", run.healthy, must_be_true=True)
    if run.slowloris:  # what the server counted (kvpool_http_connections_rejected_total)
        rep.set("server_connections_rejected",
                m1.delta_by_label(m0, "kvpool_http_connections_rejected_total", "reason"))
    if faults is not None:
        _fault_figures(rep, outs, faults)


def _engine_figures(rep: StressReport, m0: MetricsScrape, m1: MetricsScrape,
                    run: RunFacts) -> None:
    """What the engine did during the load (the two scrapes' deltas) and after the drain."""
    load_s = max(run.load_s, 1e-9)
    gen = m1.get("kvpool_generation_tokens_total") - m0.get("kvpool_generation_tokens_total")
    rep.set("server_generated_tokens_per_s", round(gen / load_s, 1))
    rep.set("preemptions", m1.delta_by_label(m0, "kvpool_preemptions_total", "mode"))
    rep.set("swap_blocks", m1.delta_by_label(m0, "kvpool_swap_blocks_total", "direction"))
    rep.set("prefix_cache_hit_tokens", int(m1.get("kvpool_prefix_cache_hits_total")
                                           - m0.get("kvpool_prefix_cache_hits_total")))
    for tier in ("device", "host"):
        pts = rep.series.get(f"usage:{tier}", [])
        rep.set(f"peak_{tier}_usage", max((v for _, v in pts), default=0.0))
    rep.set("drain_s", round(run.drain_s, 2))
    rep.set("pool_after_drain", m1.pool_figures())


def _leak_figures(rep: StressReport, after: MetricsScrape | None) -> None:
    """What the drained server still holds, from ``after`` (its last scrape). When /metrics
    is gone (``after`` None) each is None, which fails its must-be-zero check."""
    for name, read in (("leaked_device_blocks", lambda m: m.used_blocks("device")),
                       ("leaked_host_blocks", lambda m: m.used_blocks("host")),
                       ("requests_in_flight_after_drain", MetricsScrape.requests_in_flight),
                       ("queue_slots_after_drain", MetricsScrape.queue_slots),
                       ("invariant_violations", MetricsScrape.invariant_violations)):
        rep.set(name, read(after) if after is not None else None, must_be_zero=True)


def _fault_figures(rep: StressReport, outs: list[Outcome], faults: Any) -> None:
    """The injected faults' counts, and failures beyond them (which must be zero)."""
    fault_failed = sum(1 for o in outs if o.category == "fault")
    rep.set("fault_failed_requests", fault_failed)
    for k, v in faults.figures().items():
        rep.set(k, v)
    rep.set("fault_failures_over_injected",
            max(0, fault_failed - faults.failures_injected), must_be_zero=True)


def _outcome_figures(rep: StressReport, outs: list[Outcome], run: RunFacts) -> None:
    """Counts, latencies and throughput of the clients' own outcomes."""
    cats = Counter(o.category for o in outs)
    statuses = Counter(str(o.status) if o.status is not None else "none" for o in outs)
    ok = [o for o in outs if o.category == "ok"]
    lat = [o.latency for o in ok]
    ttft = [o.ttft for o in ok if o.ttft is not None]
    tokens = sum(o.completion_tokens for o in ok)
    failed = [o for o in outs if o.category == "failed"]
    unexpected_5xx = sum(1 for o in failed if o.status is not None and o.status >= 500)
    load_s = max(run.load_s, 1e-9)
    rep.latencies.extend((o.done_at, o.latency) for o in ok)
    rep.set("load_s", round(run.load_s, 2))
    rep.set("requests", len(outs))
    rep.set("requests_per_s", round(len(outs) / load_s, 1))
    rep.set("ok", cats["ok"])
    rep.set("failed", len(failed), must_be_zero=True)
    rep.set("unexpected_5xx", unexpected_5xx, must_be_zero=True)
    rep.set("status_counts", dict(sorted(statuses.items())))
    rep.set("category_counts", dict(sorted(cats.items())))
    rep.set("failure_details", sorted({o.detail for o in failed})[:8])
    rep.set("disconnected", cats["disconnected"])
    rep.set("busy_or_quota_rejected", cats["busy"])
    rep.set("hostile_sent", cats["hostile_ok"] + cats["hostile_bad"])
    rep.set("hostile_unexpected", cats["hostile_bad"], must_be_zero=True)
    rep.set("hostile_details", sorted({o.detail for o in outs
                                      if o.category == "hostile_bad"})[:8])
    rep.set("post_hostile_failures", run.post_hostile_failed, must_be_zero=True)
    rep.set("latency_p50_s", _round(percentile(lat, 50)))
    rep.set("latency_p99_s", _round(percentile(lat, 99)))
    rep.set("ttft_p50_s", _round(percentile(ttft, 50)))
    rep.set("ttft_p99_s", _round(percentile(ttft, 99)))
    rep.set("completion_tokens", tokens)
    rep.set("tokens_per_s", round(tokens / load_s, 1))


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)
