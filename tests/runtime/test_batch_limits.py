"""--max-num-batched-tokens below --max-num-seqs is refused at startup, as vLLM 0.33 does; a
limit left unset is derived from the other (NOTE(batch-limits) in runtime/engine/config.py)."""

from __future__ import annotations

import argparse

import pytest

from kvpool.errors import ConfigError
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.core import EngineCore
from kvpool.server import serve
from tests.configs import engine_config


def test_a_budget_below_max_num_seqs_is_refused_naming_both_flags():
    with pytest.raises(ConfigError) as err:
        EngineConfig(device="cpu", max_num_seqs=8, max_num_batched_tokens=4)
    assert "--max-num-batched-tokens 4 is below --max-num-seqs 8" in str(err.value)
    assert "raise --max-num-batched-tokens to at least 8 or lower --max-num-seqs" in str(
        err.value)


def test_serve_refuses_the_flags_before_anything_is_built():
    """config_from_args raises, so serve.main prints the one line and returns 2 (its
    ValueError path, tests/server/test_serve.py); main itself would serve where it did not."""
    parser = serve.add_serve_args(argparse.ArgumentParser())
    args = parser.parse_args(["--max-num-seqs", "64", "--max-num-batched-tokens", "32",
                              "--device", "cpu"])
    with pytest.raises(ValueError, match="--max-num-batched-tokens 32 is below --max-num-seqs 64"):
        serve.config_from_args(args)


@pytest.mark.parametrize("given, limits", [
    ({}, (64, 2048)),
    ({"max_num_batched_tokens": 32}, (32, 32)),  # vLLM: min(default max_num_seqs, budget)
    ({"max_num_seqs": 4096}, (4096, 4096)),
    ({"max_num_seqs": 8, "max_num_batched_tokens": 8}, (8, 8)),
])
def test_an_unset_limit_is_derived_from_the_other(given, limits):
    cfg = EngineConfig(device="cpu", **given)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == limits


def test_the_scheduler_gets_the_budget_as_configured():
    core = EngineCore(engine_config("tiny", max_num_batched_tokens=4))
    assert (core.scheduler.config.max_num_seqs,
            core.scheduler.config.max_num_batched_tokens) == (4, 4)
