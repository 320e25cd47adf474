"""``POST /v1/kvpool/lookup``: how much of a prompt this replica holds, and how busy it is.

The router (kvpool.router) asks every replica this before it places a request::

    body    the request body the client sent to /v1/completions or /v1/chat/completions
            ("prompt" | "prompt_token_ids" | "messages", optional "cache_salt"; the other
            fields are validated as the real route validates them)
    answer  {"replica_id", "block_size", "device_hit_tokens", "host_hit_tokens",
             "num_running", "num_waiting", "free_device_blocks"}
            (num_running / num_waiting: sequences, as /metrics' vllm:* gauges: load_counts.py)

NOTE(agreement): the body goes through the same RequestParser (chat template, tokenizer) and the
same BlockSpaceManager.hasher (spec and salt) as a generation request, so the router never
renders or tokenizes anything itself: replica and lookup agree by construction.

The hit counts are what the next generation request would report as ``cached_tokens``: the
leading run of the prompt's full-block hashes in the device pool, capped like admission caps it
(at least one prompt token is left to compute, its logits are needed). ``host_hit_tokens``
continues that run in the host pool when the host pool caches by hash (today it does not: 0).
A request that asks for prompt logprobs (``prompt_logprobs``, or completions ``echo`` with
``logprobs``) never reads the cache (NOTE(prompt-logprobs) in
kvpool/runtime/engine/prompt_logprobs.py), so its hit counts are 0 on every replica.
Reads only: the lock-free dict lookups of ``prompts.prefix_hits``, no pool lock, no reference taken,
no LRU update, so a lookup never changes what it measures.

NOTE(namespace): the hashes are made under the caller's own prefix-cache namespace, by the same
rule (CacheNamespace.salt) and the same identity (tenant.py: the router forwards the client's
Authorization and tenant header) as the caller's generation request: with one namespace per
tenant, a lookup never reveals another tenant's prompts.

A body is bounded and parsed like a generation request's (413 past the app's body limit;
RequestParser.decode_body's value and string bounds), large ones on the app's ParsePool, off
the event loop (NOTE(parse-off-loop) in json_body.py).
"""

from __future__ import annotations

import os
import socket

from aiohttp import web

from kvpool.server.cache_namespace import CacheNamespace
from kvpool.server.engine_client import EngineClient
from kvpool.server.json_body import ParsePool
from kvpool.server.load_counts import load_counts
from kvpool.server.protocol import RequestParser
from kvpool.server.tenant import current_tenant

__all__ = ["LOOKUP_PATH", "REPLICA_ID_KEY", "LookupRoute", "default_replica_id"]

LOOKUP_PATH = "/v1/kvpool/lookup"
REPLICA_ID_KEY = web.AppKey("kvpool_replica_id", str)


def default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class LookupRoute:
    """The lookup handler over one engine and the app's request parser, parse pool and
    prefix-cache namespace rule."""

    def __init__(self, engine: EngineClient, parser: RequestParser, parse_pool: ParsePool,
                 namespace: CacheNamespace) -> None:
        self.engine = engine  # the AsyncEngine (its core's manager and scheduler are read)
        self.parser = parser  # the RequestParser the generation routes use
        self.parse_pool = parse_pool  # the generation routes' pool
        self.namespace = namespace  # the generation routes' rule

    @classmethod
    def register(cls, app: web.Application, engine: EngineClient, parser: RequestParser,
                 parse_pool: ParsePool, namespace: CacheNamespace) -> LookupRoute:
        route = cls(engine, parser, parse_pool, namespace)
        app.router.add_post(LOOKUP_PATH, route.lookup)
        return route

    def parse(self, raw: bytes) -> tuple[list[int], str | None]:
        """The body's (token ids, client cache salt), exactly as the generation route parses
        them (no ids when the request never reads the cache); a large body's parse runs on a
        parse thread."""
        body = self.parser.decode_body(raw)
        if "prompt_token_ids" in body:  # vLLM's spelling for a pre-tokenized prompt
            body.setdefault("prompt", body.pop("prompt_token_ids"))
        req = (self.parser.parse_chat(body) if "messages" in body
               else self.parser.parse_completion(body))
        if req.params.prompt_logprobs is not None:  # NOTE(prompt-logprobs): reads no cache
            return [], req.cache_salt
        return req.prompt_ids, req.cache_salt

    def counts(self, ids: list[int], salt: str | None) -> dict[str, int]:
        core = self.engine.core
        mgr = core.manager
        bs = mgr.block_size
        hashes = mgr.hasher.hash_blocks(ids, salt)
        limit = max(0, (len(ids) - 1) // bs)  # admission's cap (manager._hits)
        dev = min(mgr.prompts.prefix_hits(hashes), limit)
        host_hits = getattr(mgr.host_pool, "prefix_hits", None)
        host = min(host_hits(hashes[dev:]), limit - dev) if host_hits and dev < limit else 0
        return {"block_size": bs, "device_hit_tokens": dev * bs, "host_hit_tokens": host * bs,
                **load_counts(self.engine),  # /metrics' vllm:* gauges (NOTE(load-counts))
                "free_device_blocks": self.engine.num_free_blocks()}

    async def lookup(self, request: web.Request) -> web.Response:
        ids, salt = await self.parse_pool.read_and_parse(request, self.parse, json_only=False)
        out = {"replica_id": request.app.get(REPLICA_ID_KEY) or default_replica_id()}
        # on the loop: the tenant is the handler's context variable (NOTE(namespace))
        out.update(self.counts(ids, self.namespace.salt(current_tenant(), salt)))
        return web.json_response(out)
