"""``kvpool serve --kv-events-config JSON``: vLLM's KVEventsConfig keys, the same meaning.

    {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
     "replay_endpoint": "tcp://*:5558", "buffer_steps": 10000, "hwm": 100000,
     "max_queue_size": 100000, "topic": "kv-events"}

``endpoint`` is bound when its host is a wildcard (``tcp://*:5557``) and connected to
otherwise, vLLM's rule (publisher.py NOTE(pub-connect)); ``replay_endpoint`` is always bound;
``tcp://HOST:0`` binds a free port and /v1/kvpool/kv_events reports the port taken.
``buffer_steps``: batches kept for replay; ``hwm``: the PUB socket's send high-water mark
(ZMQ drops beyond it for a slow subscriber); ``max_queue_size``: events waiting for the
publisher thread (beyond it new events are dropped and counted, the step never waits).
``publisher`` "null" (or events disabled) publishes nothing. Unknown keys are refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from kvpool.errors import ConfigError

__all__ = ["KVEventsConfig"]

_FLAG = "--kv-events-config"


@dataclass(frozen=True, slots=True)
class KVEventsConfig:
    enable_kv_cache_events: bool = False
    publisher: str | None = None  # None: "zmq" when enabled, else "null" (vLLM's default)
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""

    def __post_init__(self) -> None:
        if self.publisher not in (None, "zmq", "null"):
            raise ConfigError(f'{_FLAG}: publisher {self.publisher!r} is unknown: use "zmq" '
                              'or "null"')
        for name in ("buffer_steps", "hwm", "max_queue_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{_FLAG}: {name}={v!r}: use a positive integer")
        for name in ("endpoint", "replay_endpoint"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, str) and v.startswith("tcp://")):
                raise ConfigError(f"{_FLAG}: {name}={v!r}: use tcp://HOST:PORT, e.g. "
                                  "tcp://*:5557")
        if not isinstance(self.topic, str):
            raise ConfigError(f"{_FLAG}: topic={self.topic!r}: use a string")

    @property
    def enabled(self) -> bool:
        """Whether events are published at all."""
        kind = self.publisher or ("zmq" if self.enable_kv_cache_events else "null")
        return bool(self.enable_kv_cache_events) and kind == "zmq"

    @classmethod
    def from_json(cls, text: str) -> KVEventsConfig:
        """Parse the flag's JSON object; ConfigError names the problem and the fix."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{_FLAG}: not JSON ({exc}); give an object such as "
                              '\'{"enable_kv_cache_events": true, "publisher": "zmq"}\'') from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{_FLAG}: give a JSON object, not {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"{_FLAG}: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**raw)
