"""Fixtures of the copy engine tests (tests/runtime/test_copy_*.py): distinct-valued device and
host pools (tests/runtime/copy_pools.py), an injected-faults plan, and a CopyEngine over both."""

from __future__ import annotations

import pytest

from kvpool.runtime.kv.copy_engine import CopyEngine
from stress.faults import InjectedFaults
from tests.runtime.copy_pools import make_pools


@pytest.fixture
def pools():
    return make_pools()


@pytest.fixture
def faults():
    return InjectedFaults()


@pytest.fixture
def engine(pools, faults):
    dev, host = pools
    eng = CopyEngine(dev, host, faults=faults)
    yield eng
    eng.close(cancel=True)
