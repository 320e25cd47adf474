"""The router's own /metrics series (``kvpool router`` and ``kvpool epp`` share them)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from kvpool.router.scoring import REASONS

__all__ = ["RouterMetrics"]


class RouterMetrics:
    """The router's /metrics, on a private registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter("kvpool_router_decisions", "Routing decisions by reason.",
                                 ["reason"], registry=self.registry)
        # NOTE(hot-path): each reason's child resolved once (labels() locks and looks up)
        self.by_reason = {r: self.decisions.labels(r) for r in REASONS}
        self.predicted = Counter("kvpool_router_predicted_hit_tokens",
                                 "Prefix hit tokens the chosen replica's lookup reported, "
                                 "at most the prompt's (scoring.py NOTE(hit-cap)).",
                                 registry=self.registry)
        self.actual = Counter("kvpool_router_cached_tokens",
                              "usage.prompt_tokens_details.cached_tokens of proxied answers.",
                              registry=self.registry)
        self.healthy = Gauge("kvpool_router_healthy_replicas", "Replicas passing /health.",
                             registry=self.registry)
