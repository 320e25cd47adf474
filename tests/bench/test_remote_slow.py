"""bench.remote_slow on a real redis-server behind its delaying proxy, one short round: the
``probed`` arm probes every request, the product's rule (NOTE(probe-worth)) none of these
(short prompts that no full fetch could serve faster than recompute through 40 ms of round
trip), and the proxy leaves the greedy answers as they were. Counts, never times."""

from __future__ import annotations

import argparse

from bench import remote_slow


async def test_a_round_probes_every_request_only_in_the_probed_arm(tmp_path):
    args = argparse.Namespace(delay_ms=20.0, requests=4, blocks=2, repeats=1,
                              json=str(tmp_path / "r.json"))
    res = await remote_slow._main(args)
    assert res["probed.probes_per_request"] == 1.0
    assert res["worth.probes_per_request"] == 0.0
    assert remote_slow.reader.PROBE_EVERY == remote_slow.ARMS["worth"]  # put back
