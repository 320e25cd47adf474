"""EngineCore.reset_prefix_cache(reset_running_requests=True) on the tiny model with real
tensors, taken while one request runs and another is swapped out (its swap-out copy possibly
still running): both are recomputed and sample exactly the tokens of a run with no reset, the
cache is empty right after, and every block is back at the end (docs/architecture.md
"Development routes")."""

from __future__ import annotations

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

PROMPTS = {"a": [(37 * i + 11) % 500 for i in range(60)],
           "b": [(53 * i + 7) % 500 for i in range(60)]}
GREEDY = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)


def run(reset: bool) -> tuple[dict[str, list[int]], int]:
    """Each request's tokens, and the resets that succeeded (one at the first swap-out)."""
    core = EngineCore(engine_config("scarce", preemption_mode="swap", max_num_seqs=4))
    tokens: dict[str, list[int]] = {}
    done = 0
    try:
        for rid, p in PROMPTS.items():
            core.add_request(rid, p, GREEDY)
        for _ in range(1000):
            if not core.has_work():
                break
            for o in core.step():
                assert not o.error, o.error
                tokens.setdefault(o.request_id, []).extend(
                    t for c in o.outputs for t in c.token_ids)
            if reset and not done and core.scheduler.num_requests()["swapped"]:
                assert core.reset_prefix_cache(reset_running_requests=True) is True
                assert core.manager.stats().device.num_cached == 0
                assert core.check_invariants()
                done += 1
        st = core.manager.stats()
        assert not core.has_work() and st.device.num_used == 0 and st.host.num_used == 0
        assert core.check_invariants()
    finally:
        core.close()
    return tokens, done


def test_a_reset_amid_swapping_recomputes_and_changes_no_token():
    want, _ = run(reset=False)
    got, resets = run(reset=True)
    assert resets == 1
    assert {k: len(v) for k, v in got.items()} == {"a": 40, "b": 40}
    assert got == want
