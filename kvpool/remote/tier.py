"""The remote tier's contract, its stats, and the value check both tiers share.

A remote tier is a shared key -> value store of encoded block groups (``codec.py``) under the
keys of ``keys.py``. Every method is a coroutine that never raises for a remote failure: a
failure is a miss (``probe`` 0, ``get_many`` None, ``put_many`` 0) and a counter. Callers
(the read and write paths in the runtime) therefore never need a try/except around it, and a
remote outage can only cost a recompute, never a failed request.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from kvpool.remote.codec import RemoteValueError, ValueCodec
from kvpool.remote.keys import hash_of_key

Read = tuple[list[bytes | None], list[tuple[str, str]]]  # values, [(key, error kind)]

# "joined": a call that was in flight when the breaker opened and failed with it (cut short or
# timed out together): one opening is one failure event, counted under its own kind, and the
# calls that went down with it are counted here instead.
# "auth", "tls": connection-level failures named apart (their fix differs); "oom",
# "cluster", "noperm", "readonly": error replies named apart; "refused_server": a call not
# sent because INFO showed a server the tier must not use; "unsigned", "forged": values
# without a valid MAC while a secret is set, or (once) the marker of a replica writing the
# namespace without the secret or with another one (NOTE(secret-marker)).
ERROR_KINDS = ("timeout", "connection", "response", "breaker_open", "corrupt", "short",
               "foreign", "joined", "auth", "tls", "oom", "cluster", "noperm",
               "refused_server", "unsigned", "forged", "readonly")
# What became of one request's read of its prefix (the engine's read path reports it with
# note(read=...); kvpool_remote_read_requests_total{outcome}): fetched whole, partial (cut by
# the deadline or a missing value; what arrived is kept), miss (no leading run in the tier),
# probe_failed (the probe failed: a deadline, a refusal, a redirect loop), short (a run below
# min_fetch_blocks), declined_cost (probed, the cost model chose recompute), unprobed (declined
# before the probe: reader.py NOTE(probe-worth)), no_host (no host blocks to land it in),
# error (the read path raised; recomputed).
READ_OUTCOMES = ("fetched", "partial", "miss", "probe_failed", "short", "declined_cost",
                 "unprobed", "no_host", "error")
PROBE_PURPOSES = ("read", "dedup")  # NOTE(dedup-probe)


class ProbeRun(int):
    """``probe``'s answer: the leading run's length. ``failed``: some of the call failed (a
    deadline, a refused or redirected-to-death call), so the run is a lower bound and the
    call's time was no round trip (the read path's RTT estimate skips it)."""

    failed: bool = False


@runtime_checkable
class RemoteTier(Protocol):
    """What the runtime (and the router, later) may call. ``keys`` are ``Namespace`` keys."""

    async def probe(self, keys: Sequence[str], refresh: Sequence[str] = (),
                    purpose: str = "read") -> int:
        """Length of the leading run of ``keys`` present (and refreshed in the LRU; a
        :class:`ProbeRun`, or a plain int where nothing can fail). The ``refresh`` keys (the
        part of the same chain the caller already holds) are refreshed too, in the same
        round trip, present or not, and not counted. ``purpose``: "read" (a request looking
        for its prefix) or "dedup" (the write path skipping what is stored: counted apart,
        NOTE(dedup-probe))."""

    async def get_many(self, keys: Sequence[str], parts: int | None = None
                       ) -> list[bytes | None]:
        """Checked values, None for a missing or unusable one (which is deleted). ``parts``:
        at most this many requests sent at once (None: the tier's own choice); a caller
        that already runs several get_many calls at once passes 1."""

    async def put_many(self, items: Sequence[tuple[str, bytes]]) -> int:
        """Store encoded values where the key is absent (SET NX); the number newly stored."""

    async def touch(self, keys: Sequence[str]) -> int:
        """Refresh the keys' LRU age; the number that exist."""

    async def health(self) -> bool:
        """Is the tier reachable now (False without network while the breaker is open)?"""

    async def warm_up(self, connections: int = 1) -> bool:
        """Once at replica start: open ``connections`` connections (what the caller's
        concurrent calls use), so a request's fetch does not pay that on the event loop;
        False if the tier is unreachable."""

    def stats(self) -> RemoteStats:
        """A copy of the counters (safe to read from another thread)."""

    def note(self, dropped: int = 0, read: str | None = None, fetched: int = 0) -> None:
        """Count what the engine's paths decided without a call: ``dropped`` puts the write
        path did not send (backpressure); one request's ``read`` outcome (READ_OUTCOMES) and
        the blocks it ``fetched``."""

    async def aclose(self) -> None: ...


@dataclass(slots=True)
class RemoteStats:
    """Monotonic counters kept by one tier (owned and mutated by the tier on its loop);
    ``kvpool.metrics.remote`` exports a copy. ``*_blocks`` count blocks, not keys (a key holds
    ``blocks_per_object`` blocks)."""

    probes: int = 0  # read probe() calls that had keys (NOTE(dedup-probe): not the writes')
    hit_blocks: int = 0  # blocks in read probes' leading runs
    miss_blocks: int = 0  # blocks read-probed beyond the run (all of them when the call failed)
    dedup_probes: int = 0  # the write path's probe() calls (what is stored already?)
    dedup_hit_blocks: int = 0  # blocks they found stored (not sent again)
    reads: dict[str, int] = field(default_factory=dict)  # READ_OUTCOMES -> requests
    fetched_blocks: int = 0  # blocks the read path fetched and handed to the engine
    get_bytes: int = 0  # bytes of checked values returned by get_many
    get_missing: int = 0  # keys get_many returned None for (absent, unusable or failed)
    put_bytes: int = 0  # bytes of values newly stored
    puts: int = 0  # values newly stored
    puts_deduped: int = 0  # SET NX found the key already there
    puts_dropped: int = 0  # values not stored: failure, breaker open, or backpressure
    puts_paused: int = 0  # of those, the ones not sent while puts were paused after an OOM
    oom_pauses: int = 0  # times an OOM reply paused the puts
    deleted_invalid: int = 0  # unusable values deleted
    errors: dict[str, int] = field(default_factory=dict)  # kind (ERROR_KINDS) -> count
    breaker_state: int = 0  # BreakerState value at the time of the copy
    breaker_opens: int = 0  # CLOSED -> OPEN transitions
    breakers_open: int = 0  # breakers not closed (on a cluster: NOTE(node-breaker))
    health_checks: int = 0  # background PINGs sent while the breaker was open
    health_failed: int = 0  # of those, the ones that failed (the breaker stayed open)
    redirects: dict[str, int] = field(default_factory=dict)  # moved/ask -> replies followed

    def count_error(self, kind: str, n: int = 1) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + n

    def note(self, dropped: int = 0, read: str | None = None, fetched: int = 0) -> None:
        """What the engine's paths report (``RemoteTier.note``)."""
        self.puts_dropped += dropped
        if read is not None:
            if read not in READ_OUTCOMES:
                raise ValueError(f"read outcome {read!r}: one of {READ_OUTCOMES}")
            self.reads[read] = self.reads.get(read, 0) + 1
        self.fetched_blocks += fetched

    def count_probe(self, purpose: str, n: int, probed: int, g: int, failed: bool = False
                    ) -> ProbeRun:
        """One probe() call with keys: ``n`` of the ``probed`` keys (``g`` blocks each) in
        its leading run; the run as ``probe`` answers it.

        NOTE(dedup-probe): the write path probes before it stores, to skip a chain's leading
        run already there. Counted with the reads, every store of a prefix another replica
        had written made "hits": kvpool_remote_hit_blocks_total rose while nothing was
        served from the tier. Its probes are counted apart (dedup_*)."""
        if purpose not in PROBE_PURPOSES:
            raise ValueError(f"probe purpose {purpose!r}: one of {PROBE_PURPOSES}")
        if purpose == "dedup":
            self.dedup_probes += 1
            self.dedup_hit_blocks += n * g
        else:
            self.probes += 1
            self.hit_blocks += n * g
            self.miss_blocks += (probed - n) * g
        run = ProbeRun(n)
        run.failed = failed
        return run

    def copy(self) -> RemoteStats:
        return dataclasses.replace(self, errors=dict(self.errors), redirects=dict(self.redirects),
                                   reads=dict(self.reads))


# NOTE(get speed): a value's CRC-32 (zlib, ~1.7 GB/s here) costs about a third of what reading
# it from loopback Redis costs, so a check after one big MGET adds a third to every read. Split
# into parts, a part's check runs in a worker thread (zlib drops the GIL) while the loop keeps
# reading the later parts' bytes, and only the last part's check is on the critical path.
_OFFLOOP_BYTES = 256 << 10  # check a part's values in a worker thread above this many bytes


async def fetch_checked(read: Callable[[list[str]], Awaitable[Read]], codec: ValueCodec,
                        keys: list[str]) -> Read:
    """One part's ``read`` (``BoundedReads.read``: values and the keys it dropped) and
    :func:`check_values` of it (NOTE(get speed))."""
    raw, dropped = await read(keys)
    if sum(len(v) for v in raw if v is not None) > _OFFLOOP_BYTES:
        values, bad = await asyncio.to_thread(check_values, codec, keys, raw)
    else:
        values, bad = check_values(codec, keys, raw)
    return values, dropped + bad


def check_values(codec: ValueCodec, keys: Sequence[str], values: Sequence[bytes | None]
                 ) -> tuple[list[bytes | None], list[tuple[str, str]]]:
    """(values with every unusable one replaced by None, [(key, error kind)] to delete).

    Pure CPU work (a CRC per value) touching no shared state, so the Redis tier can run it in
    an executor for large reads; the caller counts the kinds on its own loop."""
    out: list[bytes | None] = []
    bad: list[tuple[str, str]] = []
    for key, value in zip(keys, values):
        if value is None:
            out.append(None)
            continue
        try:
            codec.decode(value, hash_of_key(key))
        except RemoteValueError as exc:
            bad.append((key, exc.kind))
            out.append(None)
            continue
        except ValueError:  # a key of another spec: nothing of ours lives there
            bad.append((key, "foreign"))
            out.append(None)
            continue
        out.append(value)
    return out, bad
