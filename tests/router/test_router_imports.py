"""``kvpool router`` and ``kvpool epp`` start without torch or the engine: they proxy, score and
pick, and load a tokenizer (and with it torch) only when ``--kv-events`` meets a text prompt,
off the event loop (kv_prompt.py ``load_parser``). A router pod then starts in half a second
and ~60 MB instead of two seconds and ~260 MB."""

from __future__ import annotations

from tests.fresh_imports import loaded_of


def test_the_router_and_picker_clis_import_no_torch():
    heavy = ("torch", "kvpool.runtime", "kvpool.server.handlers")
    assert loaded_of("kvpool.router.cli, kvpool.epp.cli", heavy) == []
