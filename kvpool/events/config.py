"""``kvpool serve --kv-events-config JSON``: vLLM's KVEventsConfig keys, the same meaning.

    {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
     "replay_endpoint": "tcp://*:5558", "buffer_steps": 10000, "hwm": 100000,
     "max_queue_size": 100000, "topic": "kv-events"}

``endpoint`` is bound when its host is a wildcard (``tcp://*:5557``) or it is ``ipc://``, and
connected to otherwise, vLLM's rule (publisher.py NOTE(pub-connect)); ``replay_endpoint`` is
always bound; ``tcp://HOST:0`` binds a free port and /v1/kvpool/kv_events reports the port taken.
``buffer_steps``: batches kept for replay; ``hwm``: the PUB socket's send high-water mark
(ZMQ drops beyond it for a slow subscriber); ``max_queue_size``: events waiting for the
publisher thread (beyond it new events are dropped and counted, the step never waits).
``publisher`` "null" (or events disabled) publishes nothing. Unknown keys are refused.

NOTE(zero-limits): vLLM 0.33 takes 0 for the three sizes: ``buffer_steps`` 0 keeps no batch
for replay (a replay gets the end marker alone), taken here with that meaning; ``hwm`` 0 is
ZMQ's "no limit" and ``max_queue_size`` 0 Python's unbounded queue, so one subscriber that
stops reading (or a publisher thread that falls behind) grows the replica without bound. kvpool
keeps those two bounded: 0 is refused at start with vLLM's meaning and the value to give
instead. ``inproc://`` reaches only sockets in the same process, and nothing in ``kvpool
serve`` subscribes, so it is refused with ``ipc://`` or ``tcp://`` as the fix
(docs/kv_events.md "Where kvpool differs from vLLM").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from kvpool.errors import ConfigError

__all__ = ["KVEventsConfig"]

_FLAG = "--kv-events-config"


_UNBOUNDED = {  # NOTE(zero-limits): vLLM's meaning of 0 for the limits kvpool keeps
    "hwm": "ZMQ's no limit (a subscriber that stops reading grows the replica without bound)",
    "max_queue_size": "an unbounded queue (a publisher thread behind grows the replica "
                      "without bound)",
}
_DEFAULTS = {"hwm": 100_000, "max_queue_size": 100_000}


def _check_endpoint(name: str, v: object) -> None:
    """tcp:// or ipc:// (NOTE(zero-limits): inproc:// reaches no subscriber)."""
    if v is None or (isinstance(v, str) and v.startswith(("tcp://", "ipc://"))
                     and len(v) > len("ipc://")):
        return
    if isinstance(v, str) and v.startswith("inproc://"):
        raise ConfigError(f"{_FLAG}: {name}={v!r}: inproc:// reaches only sockets in the same "
                          "process and nothing in kvpool serve subscribes; use "
                          "ipc:///PATH (this machine) or tcp://HOST:PORT")
    raise ConfigError(f"{_FLAG}: {name}={v!r}: use tcp://HOST:PORT, e.g. tcp://*:5557, or "
                      "ipc:///PATH")


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
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                least = "0 or more" if name == "buffer_steps" else "1 or more"
                raise ConfigError(f"{_FLAG}: {name}={v!r}: use an integer, {least}")
            if v == 0 and name in _UNBOUNDED:  # NOTE(zero-limits)
                raise ConfigError(f"{_FLAG}: {name}=0: vLLM reads 0 as {_UNBOUNDED[name]}; "
                                  f"kvpool keeps it bounded: give a limit, e.g. {_DEFAULTS[name]} "
                                  "(the default)")
        for name in ("endpoint", "replay_endpoint"):
            _check_endpoint(name, getattr(self, name))
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
