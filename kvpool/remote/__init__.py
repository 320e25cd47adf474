"""kvpool.remote: the shared prefix tier replicas read and write (Redis), beside ``runtime``.

- ``keys``: the key spec ``kvp:2:{ns}:{{tag}}:{hash}`` and the ``Namespace`` fingerprint.
- ``codec``: one value = fixed header + raw block bytes; checked decode.
- ``signer``: the optional keyed MAC (a shared secret) over key, header and payload.
- ``breaker``: the circuit breaker; ``node_breakers``: one per cluster master node.
- ``tier``: the ``RemoteTier`` protocol and ``RemoteStats``.
- ``redis_tier``: ``RedisTier`` on redis.asyncio; ``clients``: its URL -> one server, a
  cluster or a Sentinel-managed master; ``url_forms``: that URL checked without redis-py's
  client loaded; ``segments``: calls cut on hash-tag borders.
- ``memory_tier``: ``InMemoryTier``, a dict behind the same protocol, for unit tests only.

Imports: config, errors, core and sched only (tests/test_layering.py).

``RedisTier`` (and redis-py under it) is imported when first named, not here: importing any
``kvpool.remote`` module runs this file, and ``kvpool serve`` without ``--remote-url`` imports
``check_url`` and the signer's ``read_secret`` (NOTE(lazy-redis) in url_forms.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kvpool.remote.breaker import BreakerState, CircuitBreaker
from kvpool.remote.codec import (CorruptValueError, DecodedValue, ForeignValueError,
                                 ForgedValueError, RemoteValueError, ShortValueError,
                                 UnsignedValueError, ValueCodec)
from kvpool.remote.keys import Namespace
from kvpool.remote.signer import ValueSigner
from kvpool.remote.tier import RemoteStats, RemoteTier
from kvpool.remote.url_forms import check_url

if TYPE_CHECKING:
    from kvpool.remote.redis_tier import RedisTier

__all__ = ["BreakerState", "CircuitBreaker", "CorruptValueError", "DecodedValue",
           "ForeignValueError", "ForgedValueError", "Namespace", "RedisTier", "RemoteStats",
           "RemoteTier", "RemoteValueError", "ShortValueError", "UnsignedValueError",
           "ValueCodec", "ValueSigner", "check_url"]

_LAZY = {"RedisTier": "kvpool.remote.redis_tier"}  # name -> its module, which imports redis-py


def __getattr__(name: str) -> Any:
    """``from kvpool.remote import RedisTier`` and ``kvpool.remote.RedisTier``, imported on
    first use (NOTE(lazy-redis) in url_forms.py)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later uses find it without this call
    return value
