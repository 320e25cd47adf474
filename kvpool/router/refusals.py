"""Which replica 503s prove the request never started there (upstream.py NOTE(retry)).

NOTE(refusal-code): a 503 with Retry-After is retried on another replica only when its OpenAI
error ``code`` is a refusal before any work (``kvpool serve``'s middleware.py and
request_gate.py; the router's own, for a router in front of routers)::

    queue_full            the engine's waiting queue is full
    shutting_down         the replica drains: admission refused
    engine_unavailable    the engine cannot take requests (stopping, failed)
    too_many_connections  the connection cap (connections.py), before the request was read
    no_replica            a router with no replica that could take it

Any other code, or none, may follow work: ``request_aborted`` is a request the replica ran
and then aborted (its drain deadline, overload). That answer goes to the client as it is;
resent, the request would run twice (once per replica for one that keeps being aborted).
Before, every 503 + Retry-After counted as "full" and was resent, logged as "is full". A body
past MAX_REFUSAL bytes (upstream.py NOTE(large-answer)) is not read, so its code is unknown:
it is still taken for a refusal, as before (no ``kvpool serve`` error body is that long).
"""

from __future__ import annotations

import json
import logging

log = logging.getLogger("kvpool.router")

__all__ = ["NOT_STARTED", "never_started", "refusal_code"]

NOT_STARTED = frozenset({"queue_full", "shutting_down", "engine_unavailable",
                         "too_many_connections", "no_replica"})


def refusal_code(body: bytes) -> str | None:
    """The ``error.code`` of an OpenAI error JSON ``body``; None when it has none."""
    try:
        doc = json.loads(body)
    except ValueError:  # not JSON, not UTF-8
        return None
    err = doc.get("error") if isinstance(doc, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    return code if isinstance(code, str) else None


def never_started(url: str, body: bytes | None) -> bool:
    """Whether replica ``url``'s 503 + Retry-After (``body``; None: too long to read) proves
    the request never started there; logs what happened either way."""
    if body is None:
        log.info("replica %s refused the request (503 + Retry-After, a body too long to "
                 "read): trying another", url)
        return True
    code = refusal_code(body)
    if code in NOT_STARTED:
        log.info("replica %s refused the request before starting it (503 %s): trying another",
                 url, code)
        return True
    log.warning("replica %s answered 503 %s: the request may have run there, its answer "
                "passed on, not retried", url, code or "with no refusal code")
    return False
