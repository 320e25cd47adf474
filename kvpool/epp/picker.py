"""The decision half of the endpoint picker: the router's own membership, health and scoring,
without its proxy.

``Picker`` runs a ``Router`` (kvpool.router.proxy) set up but not listening: its app's lifetime
opens the client session, polls every replica's /health once and keeps the beats going, and
``Router.plan`` makes the choice exactly as ``kvpool router`` makes it (lookup fan-out, then
scoring.choose with the load guard; round robin when no replica has a hit). So the picker
and the router never disagree on where a request goes, and what changes in the router's
decision changes here too.

A pick answers ``host:port`` (the GIE protocol's ``<ip:port>``) of the chosen replica's base URL;
Envoy's ORIGINAL_DST cluster connects there, so the replicas must be named by IP address.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from aiohttp import web
from multidict import CIMultiDict

from kvpool.router.proxy import GENERATE_PATHS, Router
from kvpool.router.relayed import request_headers

__all__ = ["Picker", "endpoint_of"]


def endpoint_of(url: str) -> str:
    """``host:port`` of a replica base URL (the scheme's default port when none is given)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Picker:
    """Chooses a replica for a buffered request; ``start``/``close`` bracket its life."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.runner: web.AppRunner | None = None
        self.picks = 0  # requests given an endpoint (monotonic; tests and logs read it)
        self.full_duplex = 0  # bodies Envoy streamed in full duplex (service.py; monotonic)

    async def start(self) -> None:
        self.runner = web.AppRunner(self.router.app())
        await self.runner.setup()  # the router's lifetime: session, first poll, beats

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def pick(self, path: str, raw: bytes,
                   headers: Sequence[tuple[str, str]]) -> str | None:
        """The endpoint for a request to ``path`` (None: no healthy replica). Generation
        requests are checked (RequestError: not a JSON object) and planned like the router
        plans them; others go to the first healthy replica."""
        if path.split("?", 1)[0] in GENERATE_PATHS:
            body = await self.router.bodies.check(raw)
            order, _, _ = await self.router.plan(raw, body,
                                                 request_headers(CIMultiDict(headers)))
        else:
            order = self.router.replicas.healthy()
        if not order:
            return None
        self.picks += 1
        return endpoint_of(order[0].url)
