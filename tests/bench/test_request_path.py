"""bench.request_path traces a real streamed request through every layer, threads included."""

from __future__ import annotations

import asyncio
import functools

from bench.request_path import traced_files

# features a plain greedy stream does not ask for: their modules must not run for it
NOT_ASKED = ("kvpool/runtime/faults.py", "kvpool/runtime/kv/copy_engine.py",
             "kvpool/runtime/engine/failed_copies.py", "kvpool/runtime/engine/cost_meter.py",
             "kvpool/runtime/engine/prompt_logprobs.py",
             "kvpool/runtime/model/grammar_matchers.py", "kvpool/runtime/model/penalties.py",
             "kvpool/runtime/remote/importer.py", "kvpool/server/guided_fields.py",
             "kvpool/server/logprob_fields.py", "kvpool/server/vllm_fields.py",
             "kvpool/server/sampling_fields.py")


@functools.cache
def _files() -> tuple[str, ...]:
    return tuple(asyncio.run(traced_files()))


def test_the_traced_path_crosses_every_layer_on_every_thread():
    files = _files()
    # the event loop's side (route, parser) and the step thread's (scheduler, pool, model)
    for must in ("kvpool/server/handlers.py", "kvpool/server/protocol.py",
                 "kvpool/runtime/engine/core.py", "kvpool/sched/scheduler.py",
                 "kvpool/core/manager.py", "kvpool/runtime/model/llama.py"):
        assert must in files, must
    # start-up is not on the path: the app is built before recording starts
    assert "kvpool/server/app.py" not in files
    assert all(f.startswith("kvpool/") and f.endswith(".py") for f in files)


def test_a_plain_request_runs_no_code_of_features_it_did_not_ask_for():
    files = _files()
    assert not [f for f in NOT_ASKED if f in files]


def test_block_tables_are_looked_up_and_released_without_a_python_call():
    # a known sequence's table is a dict lookup (BlockTables' hook runs only on a miss) and
    # the pool computes a released table's slots itself: block_table.py holds data only
    assert "kvpool/core/block_table.py" not in _files()
