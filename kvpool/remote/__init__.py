"""kvpool.remote: the shared prefix tier replicas read and write (Redis), beside ``runtime``.

- ``keys``: the key spec ``kvp:2:{ns}:{{tag}}:{hash}`` and the ``Namespace`` fingerprint.
- ``codec``: one value = fixed header + raw block bytes; checked decode.
- ``signer``: the optional keyed MAC (a shared secret) over key, header and payload.
- ``breaker``: the circuit breaker; ``node_breakers``: one per cluster master node.
- ``tier``: the ``RemoteTier`` protocol and ``RemoteStats``.
- ``redis_tier``: ``RedisTier`` on redis.asyncio; ``clients``: its URL -> one server, a
  cluster or a Sentinel-managed master; ``segments``: calls cut on hash-tag borders.
- ``memory_tier``: ``InMemoryTier``, a dict behind the same protocol, for unit tests only.

Imports: config, errors, core and sched only (tests/test_layering.py).
"""

from kvpool.remote.breaker import BreakerState, CircuitBreaker
from kvpool.remote.clients import check_url
from kvpool.remote.codec import (CorruptValueError, DecodedValue, ForeignValueError,
                                 ForgedValueError, RemoteValueError, ShortValueError,
                                 UnsignedValueError, ValueCodec)
from kvpool.remote.keys import Namespace
from kvpool.remote.redis_tier import RedisTier
from kvpool.remote.signer import ValueSigner
from kvpool.remote.tier import RemoteStats, RemoteTier

__all__ = ["BreakerState", "CircuitBreaker", "CorruptValueError", "DecodedValue",
           "ForeignValueError", "ForgedValueError", "Namespace", "RedisTier", "RemoteStats",
           "RemoteTier", "RemoteValueError", "ShortValueError", "UnsignedValueError",
           "ValueCodec", "ValueSigner", "check_url"]
