"""The picker's own error answers (Envoy's ImmediateResponse): their JSON, their CORS headers,
and why a request found no endpoint (docs/epp.md, "Metrics and /health").

NOTE(epp-cors): ``kvpool epp`` takes the router's CORS flags (--allowed-origins and the
others, kvpool/router/cli.py), and its answers follow them as ``kvpool router``'s own answers
do (kvpool/router/proxy.py NOTE(cors-own)): a replica's answer keeps the CORS headers the
replica gave it (Envoy relays it untouched), and the picker's own 400 / 413 / 502 / 503 /
504 get those its router's ``CorsPolicy`` (kvpool/server/cors.py) gives any answer of the
router's, from the same code: ``CorsPolicy.on_response_prepare`` run on the request's
method and headers as Envoy sent them. A preflight goes to a replica like any other request
(picker.py NOTE(methods)); one the picker answers itself (no replica healthy) gets no CORS
header, as the router's own answer to a preflight gets none. Without the flags (no origin
allowed) nothing is added. Before, the flags were taken and ignored: a page could not read
the picker's errors.

NOTE(no-endpoint): a request that found no endpoint is answered the protocol's 503 with
Retry-After, counted by why (picker.py ``NO_ENDPOINT``, ``Picker.no_endpoint``; the label of
kvpool_epp_no_endpoint_answers_total): ``no_replica``, no replica healthy; ``subset_down``,
the proxy's subset hint names replicas the picker knows, none of them healthy (the answer's
code ``no_replica`` too); ``subset_unknown``, the hint names no replica the picker knows at
all (empty, unreadable, or other addresses: the picker's --replica addresses are not the pod
addresses Envoy puts in the hint). That last is a configuration fault no health beat mends,
so its answer says ``subset_unknown`` and a WARNING (one an interval at most, with the count
since the last: kvpool/throttle.py NOTE(said-counts)) names the hint's entries, the picker's
replicas and the fix. Before, all three were one ``no_replica``, with nothing logged and
/health saying ok. The 503 keeps its Retry-After: a --replicas-file change can mend it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import NamedTuple

from aiohttp import web
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from multidict import CIMultiDict

from kvpool.epp.picker import Picker, endpoint_of
from kvpool.epp.subset import SHOWN, Subset
from kvpool.router.upstream import RETRY_AFTER_SECONDS
from kvpool.server.anthropic_errors import anthropic_error, messages_path
from kvpool.server.cors import CorsPolicy
from kvpool.server.middleware import error_body, error_type
from kvpool.throttle import Throttle

__all__ = ["NoEndpoint", "cors_headers", "header", "refused"]

log = logging.getLogger("kvpool.epp")
_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
UNKNOWN_INTERVAL = 60.0  # seconds between two WARNINGs of hints naming no known replica
SUBSET_UNKNOWN = (
    "kvpool epp: %(n)d request(s) since the last report carried a subset hint naming no "
    "replica the picker knows (answered 503 subset_unknown); the latest named %(hint)s, the "
    "picker's replicas are %(known)s: give the picker (--replica, --replicas-file) the pod "
    "addresses Envoy puts in envoy.lb.subset_hint, host and port (docs/epp.md, \"The subset "
    "hint\")")


def header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode()), append_action=_OVERWRITE)


class _Asked(NamedTuple):
    """What ``CorsPolicy`` reads of a request, as Envoy sent it (NOTE(epp-cors))."""

    method: str
    headers: CIMultiDict


async def cors_headers(policy: CorsPolicy, headers: Sequence[tuple[str, str]]
                       ) -> list[tuple[str, str]]:
    """The CORS headers ``policy`` gives an answer of the picker's own to a request with
    Envoy's ``headers`` (pseudo-headers included): NOTE(epp-cors)."""
    method = next((v for k, v in headers if k == ":method"), "GET")
    asked = _Asked(method, CIMultiDict((k, v) for k, v in headers if not k.startswith(":")))
    answer = web.StreamResponse()  # no header of its own until prepared
    await policy.on_response_prepare(asked, answer)  # type: ignore[arg-type]
    return list(answer.headers.items())


def refused(status: int, message: str, code: str, param: str | None = None,
            path: str = "/", extra: Sequence[tuple[str, str]] = ()) -> pb.ProcessingResponse:
    """An ImmediateResponse with OpenAI error JSON, Anthropic's on a Messages ``path`` (the
    request's ``:path``; NOTE(anthropic-errors)), and the ``extra`` headers (its CORS): Envoy
    answers the client, no upstream."""
    headers = [header("content-type", "application/json")]
    if status == 503:
        headers.append(header("retry-after", RETRY_AFTER_SECONDS))
    headers.extend(header(k, v) for k, v in extra)
    said = anthropic_error(status, message) if messages_path(path.partition("?")[0]) else \
        error_body(message, error_type(status), param, code)
    body = json.dumps(said).encode()
    return pb.ProcessingResponse(immediate_response=pb.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=status),
        headers=pb.HeaderMutation(set_headers=headers), body=body,
        # the kvpool_epp_ prefix keeps Envoy's local_reply_config mappers off this answer
        # (docs/epp.md, "Envoy's own answers")
        details=f"kvpool_epp_{code}"))


def _shown(items: Sequence[str], total: int) -> str:
    named = ", ".join(repr(i[:80]) for i in items[:SHOWN]) or "no readable entry"
    return named + (f" (and {total - SHOWN} more)" if total > SHOWN else "")


class NoEndpoint:
    """NOTE(no-endpoint) for one picker: why a request found none, counted and said."""

    def __init__(self, picker: Picker, warnings: Throttle | None = None) -> None:
        self.picker = picker
        self.warnings = warnings if warnings is not None else Throttle(UNKNOWN_INTERVAL)
        self.said_unknown = self.warnings.tally("subset_unknown", log, SUBSET_UNKNOWN)

    def why(self, subset: Subset | None) -> tuple[str, str]:
        """(code, message) of the 503 for a request with the hint ``subset`` (None: none)
        that found no endpoint, counted by why."""
        replicas = self.picker.router.replicas.replicas
        if subset is None:
            why, message = "no_replica", "no healthy replica"
        elif any(subset.allows(r.url) for r in replicas):
            why, message = "subset_down", "no healthy replica among the proxy's subset hint"
        else:
            why = "subset_unknown"
            message = "the proxy's subset hint names no replica the endpoint picker knows"
            urls = [endpoint_of(r.url) for r in replicas]
            self.said_unknown.add(hint=_shown(subset.shown, subset.entries),
                                  known=_shown(urls, len(urls)))
        self.picker.no_endpoint[why] += 1
        return ("no_replica" if why == "subset_down" else why), message
