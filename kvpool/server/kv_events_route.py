"""``kvpool serve --kv-events-config JSON``: the KV event publisher and what a subscriber asks.

Startup (``KVEventsRoute.start``): parse the JSON (kvpool.events.config, vLLM's keys), bind the
PUB and replay sockets, and hand the engine a recorder as its block manager's observer; the
app's /metrics gains ``kvpool_kv_events_published_total`` / ``_dropped_total``; the publisher
closes after the app (its last events go out).

``GET /v1/kvpool/kv_events`` answers what a subscriber needs to follow this replica without a
request per prompt (the router's ``--kv-events`` asks it once per replica)::

    {"enabled": true, "replica_id", "instance": "9f2c...", "endpoint": "tcp://0.0.0.0:5557",
     "replay_endpoint", "topic", "block_size", "hash": {"spec": "kvpool/prefix/v1",
     "algo": "sha256", "model_id"}, "tokenizer": MODEL_DIR | null (the built-in model),
     "chat_template", "max_model_len", "tenant_namespaced": false, "tenant_header": null,
     "model_names": [...], "tenant_salt_key_id": null}

``endpoint`` is what the socket bound (a wildcard host means: this replica's own address);
``endpoint_mode`` is ``"bind"``. A publisher that connects out to an indexer (an endpoint
without a wildcard host: publisher.py NOTE(pub-connect)) has nothing to subscribe to: its
``endpoint`` is null, ``endpoint_mode`` ``"connect"`` and ``connects_to`` the address it dials
(the router scores such a replica by lookups). The replay socket is bound either way.
``instance`` is new with every publisher (every start of the replica): a subscriber that
sees it change follows the stream from scratch, even on the same ports.
Block hashes on the stream are ``BlockHasher(block_size, model_id, algo)`` chains with the
request's salt: its ``cache_salt``, or with ``tenant_namespaced`` the tenant folded in
(cache_namespace.py), the tenant read from header ``tenant_header`` or, when that is null,
from the request's API key (tenant.py). A chain's first BlockStored carries, in
``extra_keys``, the client's ``cache_salt``, or for a named tenant an opaque keyed digest
(salt_key.py NOTE(tenant-salt)) under a key drawn at this start or the operator's shared one
(salt_key.py NOTE(shared-salt-key)); ``tenant_salt_key_id`` names a shared key (replicas that
share it publish the same digests), null for a key of this start. Without the flag the route
answers ``{"enabled": false}``.

``GET /kv_event_sources`` answers as vLLM 0.33's route of that name (its instrumentator),
so a tool that finds a vLLM replica's publisher there finds this one's: the publisher's
configuration per data-parallel rank, a single rank ``"0"`` here, with ``endpoint`` and
``replay_endpoint`` where the sockets bound (or the address the PUB dials), ``{}`` without
events (docs/kv_events.md "Finding the publisher").
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from kvpool.core.hashing import HASH_VERSION
from kvpool.events.config import KVEventsConfig
from kvpool.events.publisher import EventPublisher
from kvpool.events.recorder import KVEventRecorder
from kvpool.server.app import NAMESPACE_KEY
from kvpool.server.engine_client import EngineClient
from kvpool.server.salt_key import SaltKey, published_salt

__all__ = ["KV_EVENTS_PATH", "SOURCES_PATH", "KVEventsRoute"]

log = logging.getLogger("kvpool.server")

# NOTE(events-config): two configurations that start and publish nothing useful, said at
# start as vLLM says them (its VllmConfig): without prefix caching no block is ever cached,
# so the stream holds its start marker and nothing after it; a "zmq" publisher without
# enable_kv_cache_events is off. Both started silently, the route saying events were on.
NO_CACHE = ("KV events are on (--kv-events-config) but prefix caching is off: no block is "
            "cached, so nothing is published after the start; drop --no-enable-prefix-caching")
NOT_ENABLED = ('KV events are off: --kv-events-config names publisher "zmq" without '
               '"enable_kv_cache_events": true; add it to publish')
KV_EVENTS_PATH = "/v1/kvpool/kv_events"
SOURCES_PATH = "/kv_event_sources"  # vLLM's (module docstring)


class KVEventsRoute:
    """The publisher of one replica (None when events are off) and its info route."""

    def __init__(self, publisher: EventPublisher | None, block_size: int,
                 salt_key: SaltKey | None = None) -> None:
        """``salt_key``: the operator's shared key, None for one of this start's own."""
        self.publisher = publisher
        # NOTE(tenant-salt), NOTE(shared-salt-key): the key is never published
        self.salt_key = salt_key if salt_key is not None else SaltKey.per_start()
        salts = functools.partial(published_salt, key=self.salt_key.key)
        self.recorder = (KVEventRecorder(publisher, block_size, public_salt=salts)
                         if publisher else None)
        self.info: dict[str, Any] = {"enabled": False}
        self.sources: dict[str, Any] = {}  # GET /kv_event_sources: vLLM's answer

    @classmethod
    def start(cls, config_json: str | None, block_size: int,
              salt_key: SaltKey | None = None, prefix_caching: bool = True) -> KVEventsRoute:
        """Publisher up and bound (ConfigError naming the flag if the JSON or a bind fails);
        NOTE(events-config) said once."""
        config = KVEventsConfig.from_json(config_json) if config_json else None
        publisher = EventPublisher(config) if config is not None and config.enabled else None
        if publisher is not None and not prefix_caching:
            log.warning(NO_CACHE)
        elif config is not None and config.publisher == "zmq" and not config.enabled:
            log.warning(NOT_ENABLED)
        return cls(publisher, block_size, salt_key)

    def register(self, app: web.Application, engine: EngineClient, *, replica_id: str,
                 chat_template: str | None, tenant_header: str | None = None,
                 tenants: bool = False, model_names: Sequence[str] = ()) -> None:
        """Serve the info route; close the publisher after the app (the engine stopped).
        ``tenants``: requests are told apart by tenant (an API key or a tenant header);
        ``model_names``: every served name (--served-model-name's), listed after the
        engine's."""
        self.salt_key.announce(publishing=self.publisher is not None,
                               per_tenant=app[NAMESPACE_KEY].per_tenant, tenants=tenants)
        if self.publisher is not None:
            cfg, mgr = engine.config, engine.core.manager
            self.info = {
                "enabled": True, "replica_id": replica_id,
                "instance": self.publisher.instance, **self._where(),
                "replay_endpoint": self.publisher.replay_endpoint,
                "topic": self.publisher.config.topic, "block_size": mgr.block_size,
                "hash": {"spec": f"kvpool/prefix/v{HASH_VERSION}", "algo": mgr.hasher.algo,
                         "model_id": mgr.hasher.model_id},
                "tokenizer": cfg.tokenizer or cfg.model, "chat_template": chat_template,
                "max_model_len": engine.max_model_len,
                "tenant_namespaced": app[NAMESPACE_KEY].per_tenant,
                "tenant_header": tenant_header,
                "model_names": list(dict.fromkeys(
                    n for n in (engine.model_name, *model_names) if n)),
                "tenant_salt_key_id": self.salt_key.key_id}
            self.sources = {"0": self._source()}
            app.on_cleanup.append(self._close)
        app.router.add_get(KV_EVENTS_PATH, self.describe)
        app.router.add_get(SOURCES_PATH, self.list_sources)

    def _source(self) -> dict[str, Any]:
        """The publisher's configuration as vLLM's KVEventsConfig reads, with the endpoints
        it bound (or dials) in place of the ones asked for."""
        assert self.publisher is not None
        cfg = self.publisher.config
        return {"enable_kv_cache_events": True, "publisher": "zmq",
                "endpoint": self.publisher.endpoint,
                "replay_endpoint": self.publisher.replay_endpoint,
                "buffer_steps": cfg.buffer_steps, "hwm": cfg.hwm,
                "max_queue_size": cfg.max_queue_size, "topic": cfg.topic}

    def _where(self) -> dict[str, Any]:
        """Where a subscriber connects: nowhere when the PUB connects out (module docstring)."""
        assert self.publisher is not None
        if self.publisher.mode == "bind":
            return {"endpoint": self.publisher.endpoint, "endpoint_mode": "bind"}
        return {"endpoint": None, "endpoint_mode": "connect",
                "connects_to": self.publisher.endpoint}

    async def describe(self, request: web.Request) -> web.Response:
        return web.json_response(self.info)

    async def list_sources(self, request: web.Request) -> web.Response:
        return web.json_response(self.sources)

    async def _close(self, app: web.Application) -> None:
        assert self.publisher is not None
        self.publisher.close()
