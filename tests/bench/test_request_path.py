"""bench.request_path traces a real streamed request through every layer, threads included."""

from __future__ import annotations

import asyncio

from bench.request_path import traced_files


def test_the_traced_path_crosses_every_layer_on_every_thread():
    files = asyncio.run(traced_files())
    # the event loop's side (route, parser) and the step thread's (scheduler, pool, model)
    for must in ("kvpool/server/handlers.py", "kvpool/server/protocol.py",
                 "kvpool/runtime/engine/core.py", "kvpool/sched/scheduler.py",
                 "kvpool/core/manager.py", "kvpool/runtime/model/llama.py"):
        assert must in files, must
    # start-up is not on the path: the app is built before recording starts
    assert "kvpool/server/app.py" not in files
    assert all(f.startswith("kvpool/") and f.endswith(".py") for f in files)
