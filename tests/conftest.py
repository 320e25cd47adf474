"""Fixtures every test directory shares."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture(autouse=True, scope="module")
def drop_module_caches(request):
    """When a module's tests end, clear every cache the module holds at its top level (a
    ``functools.cache`` function, tests/bench/trace_parts.SmallRuns), collect, and freeze
    what survives (the imported modules, the other modules' state).

    A worker runs a few hundred modules. Kept, a held-out shape's generated runs are
    hundreds of thousands of objects; the heap reached 2M objects, each full collection
    (every bench harness's ``gc.collect()`` before a run, and the automatic ones) took up
    to 1.2 s, and full collections were about a sixth of the suite's time. Frozen, a full
    collection walks only what the running module allocated. Garbage is collected before
    the freeze, so nothing a module let go of is kept."""
    yield
    for value in list(vars(request.module).values()):
        if isinstance(value, type):
            continue  # a class (SmallRuns itself): its instances hold the caches
        clear = getattr(value, "cache_clear", None)
        if callable(clear):
            clear()
    gc.collect()
    gc.freeze()
