"""EngineCore.step's request path on the tiny model with real tensors: the step runs from the
SchedulerOutput alone, stop strings end a sequence through the scheduler (blocks freed in
that very step), the last deltas travel inside the final update, and RequestOutput.then is
the one merge of deltas."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.engine.output_processor import CompletionOutput, RequestOutput
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

PROMPT = "paged blocks swap to the host and back " * 2


def run(core: EngineCore, requests: dict[str, SamplingParams]) -> dict[str, list]:
    for rid, p in requests.items():
        core.add_request(rid, core.tokenizer.encode(PROMPT), p)
    updates: dict[str, list] = {rid: [] for rid in requests}
    for _ in range(500):
        if not core.has_work():
            break
        for o in core.step():
            updates[o.request_id].append(o)
    assert not core.has_work()
    return updates


def merged(updates: list[RequestOutput]) -> RequestOutput:
    out = updates[0]
    for u in updates[1:]:
        out = out.then(u)
    return out


def test_a_stop_string_finishes_the_sequence_in_the_step_that_matched_it():
    core = EngineCore(engine_config("small", max_num_seqs=4, max_num_batched_tokens=256))
    try:
        greedy = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
        ref = merged(run(core, {"ref": greedy})["ref"]).outputs[0]
        assert len(ref.text) > 8
        stop = ref.text[5:8]
        cut = ref.text.index(stop)
        upd = run(core, {"stop": SamplingParams(max_tokens=24, temperature=0.0,
                                                ignore_eos=True, stop=(stop,)),
                         "other": greedy})
        assert [u.finished for u in upd["stop"]] == [False] * (len(upd["stop"]) - 1) + [True]
        out = merged(upd["stop"]).outputs[0]
        assert out.text == ref.text[:cut]
        assert (out.finish_reason, out.stop_reason) == ("stop", stop)
        assert out.num_generated < ref.num_generated  # it ended early, not at max_tokens
        assert merged(upd["other"]).outputs[0].token_ids == ref.token_ids  # unaffected
        st = core.manager.stats()
        assert st.device.num_used == 0 and st.num_seqs == 0
        assert core.scheduler.stats().finished == 3
        assert core.check_invariants()
    finally:
        core.close()


def test_then_concatenates_deltas_and_takes_the_later_state():
    a = RequestOutput("r", (CompletionOutput(0, (1, 2), "ab", 2),
                            CompletionOutput(1, (5,), "x", 1)), False, 3, 1)
    b = RequestOutput("r", (CompletionOutput(1, (6,), "y", 2, "length"),
                            CompletionOutput(0, (3,), "c", 3, "stop", "!")), True, 3, 1,
                      None, {"e2e": 1.0})
    m = a.then(b)
    assert m.outputs == (CompletionOutput(0, (1, 2, 3), "abc", 3, "stop", "!"),
                         CompletionOutput(1, (5, 6), "xy", 2, "length"))
    assert m.finished and m.metrics == {"e2e": 1.0}
    assert a.then(RequestOutput("r", (), False, 3)).outputs == a.outputs


def test_the_engine_step_never_asks_the_manager_for_tables():
    """Block ids and copy owners come in the SchedulerOutput (issue 14, deliverable 1)."""
    src = (Path(__file__).resolve().parents[2] / "kvpool/runtime/engine/core.py").read_text()
    called = {n.func.attr for n in ast.walk(ast.parse(src))
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert not called & {"get_block_table", "has_seq", "get_num_tokens"}
    assert "hasattr" not in {n.func.id for n in ast.walk(ast.parse(src))
                             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def test_swap_preemption_without_swap_space_is_said_once(caplog):
    """--preemption-mode swap with no host blocks recomputes every preemption; the start
    says so (before, nothing did). With host blocks, or by cost, nothing is said."""
    caplog.set_level(logging.WARNING, "kvpool.runtime.engine.core")
    EngineCore(engine_config("small", preemption_mode="swap", num_host_blocks=0))
    said = [r.getMessage() for r in caplog.records if "no host swap space" in r.getMessage()]
    assert len(said) == 1 and "--swap-space GIB" in said[0]
    caplog.clear()
    EngineCore(engine_config("small", preemption_mode="swap", num_host_blocks=8))
    EngineCore(engine_config("small", num_host_blocks=0))
    assert not [r for r in caplog.records if "no host swap space" in r.getMessage()]
