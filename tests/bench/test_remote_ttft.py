"""bench.remote's TTFT section on a real redis-server: 2 short prefix lengths, 1 repeat. Only
the shape of the figures and what the read path did are checked, never a speed."""

from __future__ import annotations

import pytest

from bench import remote_ttft
from tests.remote.conftest import redis_server  # noqa: F401 - the fixture (real Redis)

LENGTHS = (1, 4)


async def test_ttft_section_shape(redis_server):  # noqa: F811 - the imported fixture
    res = await remote_ttft.ttft_by_prefix(redis_server.url, LENGTHS, repeats=1)
    assert res["ttft.lengths"] == list(LENGTHS) and res["ttft.repeats"] == 1
    for b in LENGTHS:
        assert res[f"ttft.stored_blocks.{b}"] == b  # engine 1 stored every full block
        for key in ("fetch_ms", "forced_ms", "declined_ms", "recompute_ms", "est_fetch_ms",
                    "est_recompute_ms", "fetched_blocks", "forced_fetched_blocks"):
            k = f"ttft.{b}.{key}"
            assert res[f"{k}.min"] <= res[k] <= res[f"{k}.max"], k
        for key in ("fetch_ms", "forced_ms", "declined_ms", "recompute_ms", "est_fetch_ms"):
            assert res[f"ttft.{b}.{key}"] > 0, key
        # the warm-up measured a prefill rate, so the model compared two real estimates
        assert res[f"ttft.{b}.est_recompute_ms"] > 0
        assert res[f"ttft.{b}.forced_fetched_blocks"] == b  # forced: every stored block
        assert res[f"ttft.{b}.declined_fetched_blocks"] == 0  # declined: none
        decided = res[f"ttft.{b}.decided_fetch"]
        assert decided in (0.0, 1.0)  # one repeat: fetched or not
        assert res[f"ttft.{b}.fetched_blocks"] == (b if decided else 0)
    wins = [b for b in LENGTHS if res[f"ttft.{b}.forced_ms"] < res[f"ttft.{b}.declined_ms"]]
    assert res["ttft.break_even_blocks"] == (wins[0] if wins else None)
    assert res["ttft.forced_slower_blocks"] == [b for b in LENGTHS if b not in wins]
    assert res["ttft.disagree_blocks"] == [
        b for b in LENGTHS if (res[f"ttft.{b}.decided_fetch"] >= 0.5) != (b in wins)]


def test_print_names_the_break_even(capsys):
    res = {"ttft.lengths": [1, 2], "ttft.repeats": 1, "ttft.break_even_blocks": 2,
           "ttft.disagree_blocks": [1], "ttft.forced_slower_blocks": [1]}
    for b, (f, r) in {1: (3.0, 2.0), 2: (2.5, 4.0)}.items():
        for key, v in (("fetch_ms", f), ("forced_ms", f), ("declined_ms", r),
                       ("recompute_ms", r),
                       ("est_fetch_ms", 0.5), ("est_recompute_ms", 0.7),
                       ("fetched_blocks", b), ("forced_fetched_blocks", b)):
            res[f"ttft.{b}.{key}"] = res[f"ttft.{b}.{key}.min"] = res[f"ttft.{b}.{key}.max"] = v
        res[f"ttft.{b}.decided_fetch"] = 1.0
    remote_ttft.print_ttft(res)
    out = capsys.readouterr().out
    assert "break-even: 2 blocks (32 tokens)" in out and "disagrees at [1] blocks" in out


@pytest.mark.parametrize("arg", ["0", "x", ""])
def test_bad_ttft_blocks_is_a_usage_error(arg):
    from bench import remote
    with pytest.raises(SystemExit) as e:
        remote.main(["--ttft-blocks", arg])
    assert e.value.code == 2
