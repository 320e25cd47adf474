"""``kvpool serve`` loads what a plain request needs before its ready line, not torch's compiler:
the grammar mask is filled through llguidance.numpy, since importing llguidance.torch runs its
module-level ``@torch.compile``, which imports dynamo and inductor (~2.5 s CPU and ~130 MB per
server start, about 40 starts in CI). NOTE(no-llg-torch) in grammar_matchers.py."""

from __future__ import annotations

from tests.fresh_imports import loaded_of


def test_the_server_and_engine_import_no_torch_compiler():
    # kvpool.server.serve, then the engine _build imports before the ready line; redis-py
    # only with --remote-url (NOTE(lazy-redis) in kvpool/remote/url_forms.py)
    heavy = ("llguidance.torch", "torch._dynamo", "torch._inductor", "redis")
    assert loaded_of("kvpool.server.serve, kvpool.runtime.engine.async_engine", heavy) == []

