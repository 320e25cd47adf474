"""The router's bounds on one request's time, ``kvpool router --request-timeout`` and
``--first-byte-timeout`` (none by default), and the count of requests that ran past them.

NOTE(request-timeout): the liveness rule (replicas.py NOTE(liveness)) ends a request only when
nothing at all comes from its replica, and a replica whose API answers ``/health`` but whose
engine never answers one request (stuck, or hostile) held its client for as long as the
client waited. Opted in, as a route timeout of Envoy's or vllm-project/router's
``--request-timeout-secs``, these bound the request from when its replica is chosen (its body
read, ``--body-timeout``'s part), over all its attempts::

    --request-timeout S      the whole answer within S seconds; a long generation, streamed
                             or not, past S is ended too: set S above the longest one expected
    --first-byte-timeout S   each attempt's answer started (its status line) within S seconds;
                             a non-streamed generation's starts when it ends, so there it
                             bounds the whole generation, as --request-timeout does

    ran out before any answer went to the client -> 504 replica_unresponsive (OpenAI error
                                                    JSON, Anthropic's on /v1/messages), not
                                                    retried: the request may have run there
    ran out mid-stream                           -> the stream ends with its route's error
                                                    event (stream_end.py NOTE(stream-end))
    ran out in a large JSON answer passed on     -> the client's connection cut (upstream.py
                                                    NOTE(large-answer))

Either way the replica's connection closes, which aborts the request there (proxy.py
NOTE(cancel)). ``kvpool_router_request_timeouts_total{bound}`` counts them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric

__all__ = ["REQUEST_LIMITS", "RequestClock", "RequestLimits", "check_seconds"]

FLAGS = {"request": "--request-timeout", "first_byte": "--first-byte-timeout"}


def check_seconds(flag: str, value: float | None) -> float | None:
    """``value`` as a bound (None or 0: none); a ValueError naming ``flag`` when it is not a
    finite number of seconds >= 0."""
    if value is None or value == 0:
        return None
    if not 0 < value < math.inf:  # NaN too
        raise ValueError(f"{flag} {value!r}: use a finite number of seconds > 0 (0: none)")
    return value


class RequestLimits:
    """The bounds of every request the router relays (None: that bound is off), installed
    on the router's app, and a collector of how often each ran out."""

    def __init__(self, request_timeout: float | None = None,
                 first_byte_timeout: float | None = None) -> None:
        self.total = check_seconds(FLAGS["request"], request_timeout)
        self.first_byte = check_seconds(FLAGS["first_byte"], first_byte_timeout)
        self.ran_out = dict.fromkeys(FLAGS, 0)  # requests ended by each bound

    def install(self, app: web.Application, registry: CollectorRegistry) -> None:
        """Relays on ``app`` read their bounds here (upstream.py); counted on ``registry``."""
        app[REQUEST_LIMITS] = self
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "kvpool_router_request_timeouts", "Requests the router ended because their "
            "--request-timeout or --first-byte-timeout ran out, by bound.", labels=["bound"])
        for bound, count in self.ran_out.items():
            family.add_metric([bound], count)
        yield family


REQUEST_LIMITS = web.AppKey("kvpool_router_limits", RequestLimits)


class RequestClock:
    """One request's bounds over all its attempts (NOTE(request-timeout)); None: unbounded."""

    def __init__(self, limits: RequestLimits | None) -> None:
        self.loop = asyncio.get_running_loop()
        self.limits = limits
        total = None if limits is None else limits.total
        self.until = None if total is None else self.loop.time() + total
        self.first_until: float | None = None  # this attempt's first-byte deadline, if any
        self.timer: asyncio.Timeout | None = None

    def bound(self) -> asyncio.Timeout:
        """The timeout of one attempt: the request's deadline, sooner until the replica's
        answer starts (``started``) when a first-byte bound is set."""
        first = None if self.limits is None else self.limits.first_byte
        self.first_until = None if first is None else self.loop.time() + first
        when = self.until
        if self.first_until is not None and (when is None or self.first_until < when):
            when = self.first_until
        self.timer = asyncio.timeout_at(when)
        return self.timer

    def started(self) -> None:
        """The attempt's answer started: only the request's own deadline bounds it now."""
        if self.first_until is not None and self.timer is not None:
            self.first_until = None
            self.timer.reschedule(self.until)

    def ran_out(self) -> str | None:
        """Which bound ended the attempt ("request" | "first_byte", counted), None when
        neither did (its TimeoutError is another's)."""
        if self.limits is None or self.timer is None or not self.timer.expired():
            return None
        bound = "request" if self.first_until is None or (
            self.until is not None and self.until <= self.first_until) else "first_byte"
        self.limits.ran_out[bound] += 1
        return bound

    def said(self, bound: str) -> str:
        """What the client and the log read of ``bound`` running out: the flag to raise."""
        assert self.limits is not None
        if bound == "request":
            return (f"the request did not finish within {self.limits.total:g} s "
                    f"({FLAGS[bound]})")
        return f"the replica did not start its answer within {self.limits.first_byte:g} s " \
               f"({FLAGS[bound]})"
