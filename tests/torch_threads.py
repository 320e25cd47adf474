"""The one-torch-thread fixture the engine and server test folders share.

Import it into a conftest.py or a test module (``from tests.torch_threads import
one_torch_thread``): being autouse, it then applies to every test there.
"""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """The tiny model's matmuls are fastest on one torch thread (the CI box has 2 cores); the
    process's setting is put back after the module."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
