"""A request the scheduler ignores after it generated tokens is reported as ignored, not as a
completion, in the timed replay's counts, latencies and throughput."""

from __future__ import annotations

import pytest

from kvpool.replay.timed import TimedOptions, TimedReplay
from kvpool.replay.trace import TraceRequest


def test_a_request_that_outgrows_the_pool_is_ignored_not_completed():
    # 4 blocks of 16 tokens hold 64: 5 prompt + 200 output tokens can never fit, found out
    # after ~59 tokens were generated; the small one beside it completes
    reqs = [TraceRequest(index=0, arrival_s=0.0, input_length=5, output_length=200,
                         hash_ids=(1,)),
            TraceRequest(index=1, arrival_s=0.0, input_length=5, output_length=3,
                         hash_ids=(2,))]
    opts = TimedOptions(num_blocks=4, num_host_blocks=0, max_model_len=1024)
    report = TimedReplay(opts).run(reqs)
    assert (report["completed"], report["ignored"]) == (1, 1)
    assert len(report["ignored_reasons"]) == 1 and "never fit" in report["ignored_reasons"][0]
    makespan = report["makespan_s"]  # the small request's 3 tokens and 5 prompt tokens only
    assert report["throughput"]["output_tokens_per_s"] == pytest.approx(3 / makespan, rel=1e-3)
    assert report["throughput"]["prompt_tokens_per_s"] == pytest.approx(5 / makespan, rel=1e-3)
