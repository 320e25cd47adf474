"""kvpool.metrics: stats snapshots -> Prometheus collectors on a private registry."""

from kvpool.metrics.collector import CONTENT_TYPE, METRIC_NAMES, KVPoolMetrics
from kvpool.metrics.snapshot import MetricsSnapshot

__all__ = ["CONTENT_TYPE", "METRIC_NAMES", "KVPoolMetrics", "MetricsSnapshot"]
