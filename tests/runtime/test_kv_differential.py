"""Differential KV test: with greedy or seeded sampling, every request's tokens, finish reasons,
logprobs and prompt logprobs in a crowded engine equal its solo run's (tests/runtime/
differential.py builds the mixes and runs them). The crowded engine has a pool just large
enough for the largest request alone, so the mix preempts (swap, recompute, or the cost model's
choice), shares prefix blocks (copy-on-write, n > 1 forks), defragments, meets step faults, a
failed copy, slow copies and clients that leave, then runs again from the prefix cache."""

from __future__ import annotations

import pytest

from tests.runtime.differential import crowded, differences, make_trial, solo
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

SEEDS = range(4)


def _compare(trial, ref, outs, *, failures_allowed: set[int], copy_fail: bool) -> list[str]:
    failed, diffs = [], []
    for i, (r, o) in enumerate(zip(ref, outs)):
        if o is None:  # the client left
            continue
        if o.error:
            failed.append(i)
            continue
        diffs += [f"request {i}: {d}" for d in differences(r, o)]
    unexpected = [i for i in failed if i not in failures_allowed]
    # a failed copy fails the one request whose batch it was, nobody else
    assert len(unexpected) <= int(copy_fail), (unexpected, [outs[i].error for i in unexpected])
    return diffs


@pytest.mark.parametrize("mode", ["swap", "recompute"])
@pytest.mark.parametrize("seed", SEEDS)
async def test_pressure_leaves_outputs_unchanged(seed, mode):
    trial = make_trial(seed, mode, faults=False)
    ref = await solo(trial)
    run = await crowded(trial)
    diffs = _compare(trial, ref, run.first, failures_allowed=set(), copy_fail=False)
    diffs += _compare(trial, ref, run.second, failures_allowed=set(), copy_fail=False)
    assert not diffs, diffs
    # the mix did meet the pressure it is about
    assert run.snapshot.preemptions[mode] > 0 and run.snapshot.manager.prefix_hit_tokens > 0


@pytest.mark.parametrize("seed", [100 + s for s in SEEDS])
async def test_faults_and_disconnects_leave_the_others_unchanged(seed):
    trial = make_trial(seed, None, faults=True)
    ref = await solo(trial)
    run = await crowded(trial)
    diffs = _compare(trial, ref, run.first, failures_allowed=trial.step_faults,
                     copy_fail=trial.copy_fail is not None)
    # the second wave has no faults: a failed or aborted copy must not have left a cached
    # block whose bytes were never written
    diffs += _compare(trial, ref, run.second, failures_allowed=set(), copy_fail=False)
    assert not diffs, diffs
