"""Process-wide tuning belongs to the `kvpool serve` entry point, not to library classes."""

import logging
import os
import sys

import torch

from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.core import EngineCore
from kvpool.server import process_tuning
from tests.configs import engine_config


def test_engine_core_leaves_torch_threads_alone(caplog):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with caplog.at_level(logging.INFO, logger="kvpool.runtime.engine"):
            core = EngineCore(engine_config("small", num_device_blocks=64, num_host_blocks=8,
                                            num_threads=1))
        core.close()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    text = caplog.text
    assert "# device blocks: 64, # host blocks: 8" in text
    assert "max concurrency for 256 tokens: 4.00x" in text  # 64 blocks / (256 / 16)
    assert "dtype float32: the checkpoint's dtype (float32)" in text


def test_tune_process_sets_threads_and_switch_interval():
    threads, interval = torch.get_num_threads(), sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        process_tuning.tune_process(EngineConfig(num_threads=2))
        assert torch.get_num_threads() == 2
        assert sys.getswitchinterval() == process_tuning.SWITCH_INTERVAL
        process_tuning.tune_process(EngineConfig())
        usable = len(os.sched_getaffinity(0))
        want = process_tuning.default_num_threads()
        assert torch.get_num_threads() == max(1, usable - 1) == want
    finally:
        torch.set_num_threads(threads)
        sys.setswitchinterval(interval)
