"""``kvpool serve --remote-url``: build the Redis tier of this replica's namespace and the
:class:`~kvpool.runtime.remote.link.RemoteLink` the engine reads and writes through.

The server is where ``kvpool.remote`` (keys, codec, RedisTier) meets ``kvpool.runtime`` (the
engine); neither imports the other.
"""

from __future__ import annotations

import argparse

from kvpool.errors import require

from kvpool.metrics import KVPoolMetrics
from kvpool.metrics.remote import RemoteMetrics
from kvpool.remote import Namespace, ValueCodec, ValueSigner
from kvpool.remote.signer import read_secret
from kvpool.runtime.model.fingerprint import weights_fingerprint
from kvpool.runtime.remote.link import DEFAULT_WRITE_POLICY, WRITE_POLICIES, RemoteLink
from kvpool.server.engine_client import EngineClient


def add_remote_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("remote prefix tier")
    g.add_argument("--remote-url", default=None, metavar="redis://HOST:PORT",
                   help="share prefix blocks with other replicas through this Redis (or "
                        "redis+cluster://HOST:PORT[,HOST:PORT...] for a Redis/Valkey "
                        "cluster, redis+sentinel://HOST:PORT[,...]/SERVICE for Sentinel)")
    g.add_argument("--remote-write-policy", default=DEFAULT_WRITE_POLICY, choices=WRITE_POLICIES,
                   help=f"which blocks are stored (default {DEFAULT_WRITE_POLICY}, the best of "
                        "bench/route.py's trace simulation)")
    g.add_argument("--remote-prefetch-timeout-ms", type=float, default=500.0, metavar="MS",
                   help="deadline of one request's prefix fetch; what arrived is kept")
    g.add_argument("--remote-op-timeout-ms", type=float, default=250.0, metavar="MS",
                   help="deadline of one Redis round trip (a probe, a put, a health check; "
                        "a get adds its bytes over 256 MiB/s); a missed one is a miss and "
                        "counts toward the circuit breaker")
    g.add_argument("--remote-blocks-per-object", type=int, default=1, metavar="N",
                   help="blocks per Redis value (aim for 0.5-4 MiB values)")
    g.add_argument("--remote-secret-file", default=None, metavar="PATH",
                   help="a secret shared by the replicas (>= 16 bytes): values are signed "
                        "with it, and unsigned or forged ones are misses (deleted, counted); "
                        "key names are keyed with it, so a reader of Redis cannot test a "
                        "guessed prompt. Values stay unencrypted KV: protect Redis with ACLs "
                        "and TLS")


def require_tier_runs(engine: EngineClient) -> None:
    """NOTE(tier-needs): ConfigError, with the fix, where the tier could never serve: without
    prefix caching (blocks are shared by their content hash; the engine never read what the
    link fetched, and every request paid a Redis round trip for nothing) or without host
    blocks (every store and fetch is staged in them; --swap-space 0 made the tier a silent
    no-op). Said at start: nothing in the log did before."""
    mgr = engine.core.manager
    require(mgr.caching, "--remote-url needs prefix caching (the tier shares blocks by their "
                         "content hash): drop --no-enable-prefix-caching")
    require(mgr.host_pool.num_blocks > 0,
            "--remote-url needs host blocks to stage its transfers (--swap-space 0 or "
            "--num-host-blocks 0 leaves none): give --swap-space GIB, at least one prefill "
            "chunk's worth (--max-num-batched-tokens tokens)")


def namespace(engine: EngineClient, blocks_per_object: int = 1,
              secret_file: str | None = None) -> tuple[Namespace, ValueSigner | None]:
    """``engine``'s namespace in the tier and the signer of its values: with a secret, the
    names are keyed by it too (keys.py NOTE(keyed-names))."""
    core = engine.core
    layout = core.storage.layout
    # the prefix hashes' model id, not the served path (model_name.py NOTE(served-name))
    ns = Namespace(model_id=core.manager.hasher.model_id,
                   weights=weights_fingerprint(core.model),
                   dtype=str(layout.dtype).removeprefix("torch."),
                   block_size=layout.block_size, layers=layout.num_layers,
                   kv_heads=layout.num_kv_heads, head_dim=layout.head_dim,
                   blocks_per_object=blocks_per_object)
    if secret_file is None:
        return ns, None
    secret = read_secret("--remote-secret-file", secret_file)
    return ns.keyed(secret), ValueSigner(secret)


def build_link(engine: EngineClient, url: str, *, write_policy: str = DEFAULT_WRITE_POLICY,
               prefetch_timeout_ms: float = 500.0, op_timeout_ms: float = 250.0,
               connect_timeout_ms: float = 200.0, blocks_per_object: int = 1,
               fetch_bias: float = 1.0, observer=None, secret_file: str | None = None,
               metrics: KVPoolMetrics | None = None) -> RemoteLink:
    """A RemoteLink on a RedisTier at ``url`` for ``engine``'s namespace (not connected yet:
    redis.asyncio connects on the first call, inside the tier's own deadline).

    ``metrics``: the server's registry; the ``kvpool_remote_*`` families (tier counters,
    breaker, probe/get/put and prefetch-wait histograms) are rendered on it from then on.
    ``observer`` (without ``metrics``) receives the tier's round-trip times instead.
    ``fetch_bias``: ``RemoteLink.fetch_bias`` (bench.remote's forced-fetch arm sets 0).
    ``op_timeout_ms``: the tier's deadline of one round trip (``--remote-op-timeout-ms``);
    ``connect_timeout_ms``: of opening one connection (the tier's default, 0.2 s).
    ``secret_file``: sign values with the secret it holds and key the names with it
    (``--remote-secret-file``, keys.py NOTE(keyed-names))."""
    ns, signer = namespace(engine, blocks_per_object, secret_file)
    codec = ValueCodec(ns, engine.core.storage.bytes_per_block, signer)
    remote_metrics = None
    if metrics is not None:
        remote_metrics = RemoteMetrics(lambda: tier.stats())  # late-bound: tier is next
        observer = remote_metrics.observe
    from kvpool.remote import RedisTier  # NOTE(lazy-redis) in kvpool/remote/url_forms.py
    tier = RedisTier(url, codec, op_timeout=op_timeout_ms / 1000.0,
                     connect_timeout=connect_timeout_ms / 1000.0, observer=observer)
    link = RemoteLink(tier=tier, group_keys=ns.group_keys, encode=codec.encode,
                      split_blocks=codec.split,
                      blocks_per_object=blocks_per_object, write_policy=write_policy,
                      prefetch_timeout_s=prefetch_timeout_ms / 1000.0, fetch_bias=fetch_bias,
                      observe=observer, key_at=ns.key)
    if remote_metrics is not None:
        remote_metrics.attach(metrics)
    return link
