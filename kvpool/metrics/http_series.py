"""vLLM's HTTP series: every answer of the OpenAI server, under the names vLLM exports.

NOTE(http-series): vLLM's server instruments its app with prometheus_fastapi_instrumentator's
defaults (vllm/entrypoints/serve/instrumentator/metrics.py: ``Instrumentator(excluded_handlers=
[...], registry=registry).add()``), and dashboards and alerts made for vLLM read those series
(an error-rate alert on ``http_requests_total{status="5xx"}``). Without them such an alert found
nothing on kvpool and never fired. The same five families, names, labels, help texts and
buckets (the instrumentator's ``metrics.default``)::

    http_requests_total{handler,method,status}           counter; status grouped: "2xx", "4xx"
    http_request_size_bytes{handler}                     summary of the request's Content-Length
    http_response_size_bytes{handler}                    summary of the answer's Content-Length
                                                         (0 for a stream: it has none)
    http_request_duration_highr_seconds                  histogram, no labels, 21 buckets
    http_request_duration_seconds{handler,method}        histogram, buckets 0.1, 0.5, 1

``handler`` is the route's template (``/v1/responses/{response_id}``), or "none" where no
route matched the path (the instrumentator's ``should_group_untemplated``): a client requesting
random paths adds no series. ``method`` is one of METHODS or "other" (vLLM writes any token a
client sends; bounded here for the same reason). Answers to EXCLUDED_HANDLERS are not counted,
as vLLM leaves them out; the instrumentator matches each as a regular expression searched in
the template (or, for no route, the path), so a path holding one (``/metrics/x``) is left out
too. Where the answers are seen: kvpool/server/http_counting.py.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate

from prometheus_client.core import (CounterMetricFamily, HistogramMetricFamily, Metric,
                                    SummaryMetricFamily)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kvpool.metrics.collector import (KVPoolMetrics, LatencyHistogram, go_float,
                                      help_head, label_text)

__all__ = ["EXCLUDED_HANDLERS", "HTTP_METRIC_NAMES", "HttpSeries", "excluded"]

HTTP_METRIC_NAMES = ("http_requests_total", "http_request_size_bytes",
                     "http_response_size_bytes", "http_request_duration_highr_seconds",
                     "http_request_duration_seconds")
# vLLM's excluded_handlers, verbatim (regular expressions; none has a metacharacter)
EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT",
                     "TRACE"))
UNTEMPLATED = "none"
# the instrumentator's default buckets
HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5,
                 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0)
LOWR_BUCKETS = (0.1, 0.5, 1.0)
_LOWR_LE = [floatToGoString(b) for b in LOWR_BUCKETS] + ["+Inf"]
_SIZE_DOC = ("Content length of {} by handler. Only value of header is respected. Otherwise "
             "ignored. No percentile calculated. ")
_DOCS = {
    "http_requests_total": "Total number of requests by method, status and handler.",
    "http_request_size_bytes": _SIZE_DOC.format("incoming requests"),
    "http_response_size_bytes": _SIZE_DOC.format("outgoing responses"),
    "http_request_duration_highr_seconds": "Latency with many buckets but no API specific "
    "labels. Made for more accurate percentile calculations. ",
    "http_request_duration_seconds": "Latency with only few buckets by handler. Made to be "
    "only used if aggregation by handler is important. ",
}


def excluded(handler: str) -> bool:
    """An answer vLLM does not count (``handler``: the template, or the path of no route)."""
    return any(pattern in handler for pattern in EXCLUDED_HANDLERS)


class HttpSeries(Collector):
    """The five families of the module docstring, counted under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[tuple[str, str, str], int] = {}  # (handler, method, status)
        self._sizes: tuple[dict[str, list[float]], ...] = ({}, {})  # handler -> [count, sum]
        self._lowr: dict[tuple[str, str], list[float]] = {}  # -> bucket counts, then the sum
        self.highr = LatencyHistogram("http_request_duration_highr_seconds",
                                      _DOCS["http_request_duration_highr_seconds"],
                                      HIGHR_BUCKETS)

    @classmethod
    def attach(cls, metrics: KVPoolMetrics) -> HttpSeries:
        """New series, rendered with every scrape of ``metrics`` (after the engine's own).
        NOTE(http-render): add_histogram takes any collector with ``lines(out)``, the lean
        renderer's hook; a labelled histogram and summaries are no LatencyHistogram."""
        series = cls()
        metrics.add_histogram(series)  # type: ignore[arg-type]
        return series

    @staticmethod
    def labels(handler: str | None, method: str) -> tuple[str, str]:
        """(handler, method) as written: a bounded set whatever a client sends."""
        return handler or UNTEMPLATED, method if method in METHODS else "other"

    def answered(self, handler: str | None, method: str, status: int, request_bytes: int,
                 response_bytes: int) -> None:
        """One answer, when its status is known (``handler``: the route's template or None)."""
        key = (*self.labels(handler, method), f"{str(status)[0]}xx")
        with self._lock:
            self._answers[key] = self._answers.get(key, 0) + 1
            for sizes, amount in zip(self._sizes, (request_bytes, response_bytes)):
                entry = sizes.setdefault(key[0], [0, 0.0])
                entry[0] += 1
                entry[1] += amount

    def ended(self, handler: str | None, method: str, seconds: float) -> None:
        """The answer's time, arrival to its last byte handed to the transport."""
        key = self.labels(handler, method)
        self.highr.observe(seconds)
        with self._lock:
            counts = self._lowr.get(key)
            if counts is None:
                counts = self._lowr[key] = [0.0] * (len(LOWR_BUCKETS) + 2)
            counts[bisect_left(LOWR_BUCKETS, seconds)] += 1
            counts[-1] += seconds

    def _copy(self) -> tuple[dict, list[dict], dict]:
        """One consistent read of the labelled counts, sorted by labels."""
        with self._lock:
            answers = dict(sorted(self._answers.items()))
            sizes = [dict(sorted((h, tuple(e)) for h, e in s.items())) for s in self._sizes]
            lowr = dict(sorted((k, tuple(c)) for k, c in self._lowr.items()))
        return answers, sizes, lowr

    def describe(self) -> list[Metric]:
        return [_family(name) for name in HTTP_METRIC_NAMES]

    def collect(self) -> Iterator[Metric]:
        answers, sizes, lowr = self._copy()
        total = _family("http_requests_total")
        for key, n in answers.items():
            total.add_metric(list(key), n)
        yield total
        for name, by_handler in zip(HTTP_METRIC_NAMES[1:3], sizes):
            fam = _family(name)
            for handler, (count, amount) in by_handler.items():
                fam.add_metric([handler], count, amount)
            yield fam
        yield from self.highr.collect()
        fam = _family("http_request_duration_seconds")
        for key, counts in lowr.items():
            cum = accumulate(counts[:-1])
            fam.add_metric(list(key), list(zip(_LOWR_LE, cum)), counts[-1])
        yield fam

    def lines(self, out: list[str]) -> None:
        """The text exposition of ``collect`` (KVPoolMetrics.render's fast path)."""
        answers, sizes, lowr = self._copy()
        name = "http_requests_total"
        out.append(help_head(name, "counter", _DOCS[name]))
        for (h, m, st), n in answers.items():
            pairs = (("handler", h), ("method", m), ("status", st))
            out.append(f"{name}{{{label_text(pairs)}}} {go_float(n)}\n")
        for name, by_handler in zip(HTTP_METRIC_NAMES[1:3], sizes):
            out.append(help_head(name, "summary", _DOCS[name]))
            for handler, (count, amount) in by_handler.items():
                tail = f"{{{label_text([('handler', handler)])}}}"
                out.append(f"{name}_count{tail} {go_float(count)}\n"
                           f"{name}_sum{tail} {go_float(amount)}\n")
        self.highr.lines(out)
        name = "http_request_duration_seconds"
        out.append(help_head(name, "histogram", _DOCS[name]))
        for (h, m), counts in lowr.items():
            cum = list(accumulate(counts[:-1]))
            out.extend(f"{name}_bucket{{{label_text([('handler', h), ('le', le), ('method', m)])}}}"
                       f" {go_float(n)}\n" for le, n in zip(_LOWR_LE, cum))
            tail = f"{{{label_text([('handler', h), ('method', m)])}}}"
            out.append(f"{name}_count{tail} {go_float(cum[-1])}\n{name}_sum{tail} "
                       f"{go_float(counts[-1])}\n")


def _family(name: str) -> Metric:
    doc = _DOCS[name]
    if name == "http_requests_total":
        return CounterMetricFamily("http_requests", doc, labels=["handler", "method", "status"])
    if name.endswith("_bytes"):
        return SummaryMetricFamily(name, doc, labels=["handler"])
    if name == "http_request_duration_seconds":
        return HistogramMetricFamily(name, doc, labels=["handler", "method"])
    return HistogramMetricFamily(name, doc)
