"""The tenant salts a replica publishes in its KV events (``published_salt``,
NOTE(tenant-salt)) and their key: ``kvpool serve --kv-events-salt-key-file PATH`` or
``$KVPOOL_KV_EVENTS_SALT_KEY``, else one drawn at every start.

NOTE(shared-salt-key): a named tenant's chain publishes ``"kvpool-ns-"`` + an HMAC of its
salt under this key, and an indexer that keys blocks on their tokens and extra keys (llm-d's)
folds that value into its key for the chain's blocks. With a key drawn per start, two replicas
(or one replica before and after a restart) publish different values for the same tenant and
prompt, so such an indexer can never see that replica B holds tenant t's prefix too. Replicas
given one secret publish one value per (tenant, cache_salt). The secret comes from a file (a
mounted secret: never on the command line, where ``ps`` shows it to every user) or from an
environment variable (a platform that injects secrets only so); the file wins when both are
given, as ``--api-key`` wins over ``$KVPOOL_API_KEY``. The HMAC key is SHA-256 of a label and
the secret, so a secret reused elsewhere (``--remote-secret-file``) gives unrelated values; a
second label gives the key id that the start log and the kv_events route show, so operators
can check that replicas share one key without the key itself being shown (docs/kv_events.md
"Salts in extra_keys").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from kvpool.errors import require
from kvpool.remote.signer import MIN_SECRET, read_secret
from kvpool.server.cache_namespace import NS_MARK

__all__ = ["CLEAR_TOKENS", "MIN_KEY_BYTES", "SALT_KEY_ENV", "SALT_KEY_FLAG", "SaltKey", "published_salt",
           "resolve_salt_key"]

log = logging.getLogger("kvpool.server")

SALT_KEY_FLAG = "--kv-events-salt-key-file"
SALT_KEY_ENV = "KVPOOL_KV_EVENTS_SALT_KEY"
MIN_KEY_BYTES = MIN_SECRET  # a shorter secret is refused, as for the remote tier
_KEY_LABEL = b"kvpool kv-events tenant salt key v1\x00"
_ID_LABEL = b"kvpool kv-events tenant salt key id v1\x00"


@dataclass(frozen=True, slots=True)
class SaltKey:
    """The HMAC key of the published tenant salts and where it came from."""

    key: bytes = field(repr=False)  # never published, never logged
    source: str = ""  # the flag and path, or the variable; "" for a key of this start
    key_id: str | None = None  # 16 hex digits naming a shared key; None: drawn at this start

    @classmethod
    def per_start(cls) -> SaltKey:
        """The default: a key of this start's own, shared with no one."""
        return cls(secrets.token_bytes(32))

    @classmethod
    def from_secret(cls, secret: bytes, source: str) -> SaltKey:
        """A shared key from the operator's secret (surrounding whitespace dropped)."""
        secret = secret.strip()
        require(len(secret) >= MIN_KEY_BYTES,
                f"{source}: the key has {len(secret)} bytes: use at least {MIN_KEY_BYTES}, "
                "the same on every replica (e.g. head -c 32 /dev/urandom | base64 > FILE)")
        return cls(hashlib.sha256(_KEY_LABEL + secret).digest(), source,
                   hashlib.sha256(_ID_LABEL + secret).hexdigest()[:16])

    @property
    def shared(self) -> bool:
        return self.key_id is not None

    def announce(self, *, publishing: bool, per_tenant: bool, tenants: bool = False) -> None:
        """Say once, at start, what the key means for this replica's events (``per_tenant``:
        tenants have prefix caches of their own), and where tenants' events must not reach
        (NOTE(clear-tokens)): whenever tenants are told apart (``tenants``), sharing one
        cache or not, the token ids they send go out all the same."""
        if publishing and (per_tenant or tenants):
            log.warning(CLEAR_TOKENS)
        if self.shared and not (publishing and per_tenant):
            log.warning("%s has no effect: %s", self.source,
                        "no KV events are published (--kv-events-config)" if not publishing
                        else "no tenant's salt is published as a keyed digest (tenants need "
                        "--api-key or --tenant-header, without --shared-prefix-cache)")
        elif self.shared:
            log.info("KV events: named tenants' salts are keyed by the shared key from %s "
                     "(key id %s): replicas given the same key publish the same extra_keys "
                     "for the same tenant and prompt", self.source, self.key_id)
        elif publishing and per_tenant:
            log.info("KV events: named tenants' salts are keyed by a key drawn at this start: "
                     "other replicas, and this one after a restart, publish other extra_keys "
                     "for the same tenant and prompt, so a token-keyed indexer (llm-d's) sees "
                     "no prefix shared across them; give every replica the same secret (16 "
                     "bytes or more) with %s PATH or $%s to share one", SALT_KEY_FLAG,
                     SALT_KEY_ENV)


# NOTE(clear-tokens): vLLM's BlockStored carries each block's token ids, so anyone who reads
# the stream (or asks the replay socket for its history) reads every tenant's prompts. Nor is
# the tenant hidden: the block hashes fold it in unkeyed (kvpool's router and epp score on them
# without a key), so a reader who hashes a chain's tokens under guessed tenant names, or
# guessed API keys, finds whose chain it is, on every replica and across restarts, whatever
# the salt key. Tenants must not reach the sockets.
CLEAR_TOKENS = ("KV events carry every tenant's prompt token ids in clear (vLLM's BlockStored), "
                "and the replay socket serves them from this start on: bind the publisher and "
                "replay endpoints (--kv-events-config) where only the router or indexer, not "
                "tenants, can connect (docs/kv_events.md \"Salts in extra_keys\")")


def resolve_salt_key(path: str | None, environ: Mapping[str, str]) -> SaltKey | None:
    """The operator's key: ``--kv-events-salt-key-file``, else ``$KVPOOL_KV_EVENTS_SALT_KEY``
    (set, even empty, counts as given), else None (a key per start). ConfigError names the
    flag or the variable."""
    if path is not None:
        return SaltKey.from_secret(read_secret(SALT_KEY_FLAG, path), f"{SALT_KEY_FLAG} {path}")
    value = environ.get(SALT_KEY_ENV)
    if value is None:
        return None
    return SaltKey.from_secret(value.encode(errors="surrogateescape"), f"${SALT_KEY_ENV}")


def published_salt(salt: str | None, key: bytes) -> str | None:
    """What of a request's prefix-cache salt (``CacheNamespace.salt`` made it) a KV event
    publishes in a chain's first BlockStored ``extra_keys``, where vLLM puts its cache_salt.

    NOTE(tenant-salt): an indexer that keys blocks on their tokens (llm-d's) sees only that
    entry, so a tenant's part must show there or two tenants' identical prompts are one chain
    to it. A salt without the namespace mark (one namespace) and the anonymous tenant's are
    the client's ``cache_salt`` as sent, which a scorer folds in as vLLM's; a named tenant's
    is ``"kvpool-ns-"`` + an HMAC-SHA256 of the whole salt under ``key`` (32 hex digits): the
    same for the same (tenant, cache_salt) and distinct across them, as kvpool's chains are,
    and never the header value, the API key or its digest (docs/kv_events.md "Salts in
    extra_keys"); the block hashes still let a reader test a guessed tenant
    (NOTE(clear-tokens)).

    NOTE(private-salt): a salt that goes on past the namespace's JSON, or holds a NUL without
    one (no client's can: parsing refuses it; prompt-logprobs requests once were prefilled
    under such a salt, with the engine's request id in it) names a chain no other request
    can hit: it publishes as a named tenant's does, a digest that matches nothing, never
    raw. This runs on the step thread: it never raises (a JSONDecodeError here once stopped
    the engine)."""
    if salt is None or not salt.startswith(NS_MARK) and "\x00" not in salt:
        return salt  # the client's cache_salt as sent (a client's holds no NUL: parsing)
    if not salt.startswith(NS_MARK):
        return _keyed(salt, key)
    try:
        (tenant, client), end = json.JSONDecoder().raw_decode(salt, len(NS_MARK))
    except (ValueError, TypeError):  # no pair at all: as a private salt
        tenant, client, end = None, None, -1
    if not tenant and end == len(salt):
        return client
    return _keyed(salt, key)


def _keyed(salt: str, key: bytes) -> str:
    """NOTE(tenant-salt)'s digest of a whole salt under ``key``."""
    return "kvpool-ns-" + hmac.new(key, salt.encode("utf-8", "surrogatepass"),
                                   hashlib.sha256).hexdigest()[:32]
