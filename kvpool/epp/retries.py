"""Envoy's retry count held against ``--fallbacks`` (docs/epp.md, "Fallback endpoints").

NOTE(retry-check): the pick lists the chosen replica and up to ``--fallbacks`` more (picker.py
NOTE(fallbacks)); Envoy goes down the list on each retry, as many as its route's
``retry_policy.num_retries``, which the picker cannot read. The two must match, and Envoy's
retries never reach the picker (its ext_proc filter runs once, before the router filter), so
the picker reads what the answer's headers say of them (service.py NOTE(answer-phase)): the
attempts Envoy made (``x-envoy-attempt-count``, with ``include_attempt_count_in_response`` on
the route's virtual host) and why Envoy answered itself (the ``response.code_details``
attribute, the ext_proc filter's ``response_attributes``)::

    attempts > --fallbacks + 1                  num_retries is above --fallbacks: the retries
                                                past the list went to the cluster's fallback
                                                policy (round robin: outside the router's
                                                order and the subset hint)
    Envoy's own failure to connect (or a        num_retries is below --fallbacks (or the
    refused stream) after fewer attempts than   cluster's circuit_breakers max_retries held the
    the list had endpoints                      retry back): the client got a 503 while the
                                                list had replicas left to try

Each mismatch is logged once (a WARNING naming the fix), as is a config whose answers say
neither (the check cannot run), never per request. A config that matches is never logged: its
answers hold nothing to say about it until a replica fails.

NOTE(failovers): each answer whose ``x-envoy-attempt-count`` is above 1 is counted
(``failovers``, kvpool_epp_failovers_total): Envoy's first attempt, at the picker's chosen
replica, failed before that replica took the request (a replica dead since its last health
beat: the window --fallbacks is for), and a later one on the list answered, or Envoy itself
after the last. So the check runs, and the answers' headers are read, for as long as they
carry the count, mismatches said or not (``wanted``). Before, a dead pick showed nowhere in the
picker's metrics: Envoy's retries never reach it and the router's ``reason="retry"`` stays 0.
"""

from __future__ import annotations

import logging

__all__ = ["RetryCheck", "envoys_failure", "not_started", "timed_out"]

log = logging.getLogger("kvpool.epp")
DOC = 'docs/epp.md, "Fallback endpoints"'
# response.code_details of Envoy's 504s: a route, per-try or stream idle timeout
TIMEOUTS = ("response_timeout", "upstream_per_try_timeout", "upstream_per_try_idle_timeout",
            "stream_idle_timeout")


def envoys_failure(details: str | None) -> bool:
    """Whether ``details`` (``response.code_details``) is Envoy's own answer for an upstream
    that took no request: a connection refused or failed, a stream refused or reset before
    any answer, no host to try."""
    return details is not None and (details.startswith("upstream_reset_before_response_started")
                                    or details == "no_healthy_upstream")


def not_started(details: str | None) -> bool:
    """Whether ``details`` (``response.code_details``) says the upstream provably never got
    the request: no connection (refused, failed, timed out), a stream it refused, a circuit
    breaker's overflow, no host; a connection ended after the request went out is not
    (kvpool/router/affinity.py NOTE(holder-down): such a POST may have run)."""
    if details is None or not envoys_failure(details):
        return False
    return details == "no_healthy_upstream" or any(why in details for why in (
        "connection_failure", "connection_timeout", "refused_stream", "overflow"))


def timed_out(status: str | None, details: str | None) -> bool:
    """Whether the answer (``status``, ``details``) is Envoy's own 504 for an upstream that
    took the request and answered nothing in time (a silent replica): it may have run it
    (kvpool/router/upstream.py NOTE(retry)), and the shipped routes never retry it."""
    return status == "504" and details in TIMEOUTS


def _retried_for(details: str) -> bool:
    """Whether the failure ``details`` names is one the shipped route retries
    (``connect-failure``, ``refused-stream``)."""
    return envoys_failure(details) and ("connection_failure" in details
                                        or "refused_stream" in details)


def _attempts(value: str | None) -> int | None:
    """The attempt count ``x-envoy-attempt-count`` says (None: absent or not a count)."""
    ok = value is not None and value.isascii() and value.isdigit() and len(value) <= 9
    return int(value) if ok else None  # type: ignore[arg-type]


class RetryCheck:
    """NOTE(retry-check) for one picker's ``fallbacks``."""

    def __init__(self, fallbacks: int) -> None:
        self.fallbacks = fallbacks
        self.said: set[str] = set()  # the mismatches logged (each once)
        self.failovers = 0  # answers after more than one attempt (NOTE(failovers); monotonic)

    @property
    def wanted(self) -> bool:
        """Whether the answers can still be counted (NOTE(failovers)): they carry Envoy's
        attempt count, as far as seen."""
        return "blind" not in self.said

    def answer(self, attempts: str | None, details: str | None) -> None:
        """One answer's headers: Envoy's ``attempts`` and the ``details`` of its own answer
        (None: the header or attribute is not sent), for a pick that listed ``fallbacks`` + 1
        endpoints (picker.py NOTE(padded))."""
        made = _attempts(attempts)
        if made is not None and made > 1:
            self.failovers += 1
        if attempts is None or details is None:  # no count ("blind"): ``wanted`` reads no more
            return self.once("blind" if attempts is None else "no_details",
                             "kvpool epp: --fallbacks %d cannot be checked against "
                             "Envoy's retry_policy num_retries: its answers carry no %s; set %s "
                             "(%s)", self.fallbacks, "x-envoy-attempt-count" if attempts is
                             None else "response.code_details", "include_attempt_count_in_"
                             "response: true on the route's virtual host" if attempts is None
                             else 'response_attributes: ["response.code_details"] on the '
                             "ext_proc filter", DOC)
        if made is None:
            return None
        listed = self.fallbacks + 1
        if made > self.fallbacks + 1:
            return self.once("over", "kvpool epp: Envoy made %d attempts at a request the "
                             "picker listed %d endpoint(s) for: its route's retry_policy "
                             "num_retries is above --fallbacks %d, and the retries past the "
                             "list went to the cluster's fallback policy, outside the router's "
                             "order and the subset hint; set num_retries: %d (%s)", made, listed,
                             self.fallbacks, self.fallbacks, DOC)
        if made < listed and _retried_for(details):
            return self.once("under", "kvpool epp: Envoy answered a request itself (%s) after "
                             "%d attempt(s), with %d endpoint(s) of the picker's list untried: "
                             "its route's retry_policy num_retries is below --fallbacks %d (or "
                             "its cluster's circuit_breakers max_retries held the retry back); "
                             "set num_retries: %d (%s)", details, made, listed - made,
                             self.fallbacks, self.fallbacks, DOC)
        return None

    def once(self, kind: str, message: str, *args: object) -> None:
        if kind not in self.said:
            self.said.add(kind)
            log.warning(message, *args)
