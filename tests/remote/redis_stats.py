"""What a real redis-server says it did: command counters read from INFO commandstats, so a
test can assert how many round trips the tier made."""

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
