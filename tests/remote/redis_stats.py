"""What a real redis-server says it did: command counters read from INFO commandstats, so a
test can assert how many round trips the tier made; and the tier's reads counted on its side
(a pipeline of GETRANGE is one round trip of many commands: NOTE(bounded-get))."""

import redis


def mget_calls(url: str) -> int:
    """MGET commands the server at ``url`` has run since it started."""
    r = redis.Redis.from_url(url)
    try:
        return int(r.info("commandstats").get("cmdstat_mget", {}).get("calls", 0))
    finally:
        r.close()


def commandstats(port: int) -> dict[str, int]:
    r = redis.Redis(port=port)
    try:
        return {k.removeprefix("cmdstat_"): v["calls"]
                for k, v in r.info("commandstats").items()}
    finally:
        r.close()


class CountedReads:
    """Stands in for a tier's ``reads`` (``tier.reads = CountedReads(tier.reads)``): the real
    reads, each call (one round trip) and its keys counted."""

    def __init__(self, reads) -> None:
        self.reads = reads
        self.calls = 0
        self.keys = 0

    async def read(self, keys: list[str]):
        self.calls += 1
        self.keys += len(keys)
        return await self.reads.read(keys)


def error_replies(port: int, code: str) -> int:
    """Error replies starting with ``code`` (TRYAGAIN, CLUSTERDOWN...) the server on ``port``
    has sent since it started (INFO errorstats): each one a call Redis saw and refused."""
    r = redis.Redis(port=port)
    try:
        return int(r.info("errorstats").get(f"errorstat_{code}", {}).get("count", 0))
    finally:
        r.close()
