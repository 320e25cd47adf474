"""An admitted request is never dropped for capacity (issue 12 follow-up, NOTE(alone)): the
engine refuses up front a request whose prompt + max_tokens the whole device pool cannot hold,
naming max_tokens and the largest value that fits; one at that bound runs to completion."""

from __future__ import annotations

import pytest
import torch

from kvpool.errors import RequestError
from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config

PROMPT = [5 + i for i in range(16)]  # 4 blocks of 4; the pool holds 24 tokens


@pytest.fixture(scope="module")
def core():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield EngineCore(engine_config("tiny", max_num_seqs=4, max_num_batched_tokens=64,
                                   enable_prefix_caching=False))
    torch.set_num_threads(before)


def _params(max_tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


def test_prompt_plus_max_tokens_beyond_the_whole_pool_is_a_400_naming_max_tokens(core):
    with pytest.raises(RequestError) as e:
        core.validate(PROMPT, _params(10))  # 16 + 10 - 1 = 25 tokens: 7 blocks > 6
    assert e.value.param == "max_tokens" and e.value.code == "context_length_exceeded"
    assert "max_tokens <= 9" in str(e.value) and "6 blocks of 4 tokens" in str(e.value)
    core.validate(PROMPT, _params(9))  # 24 tokens stored at most: fits


def test_a_request_at_the_bound_runs_to_completion(core):
    core.add_request("r", PROMPT, _params(9))
    outs = []
    for _ in range(200):
        if not core.has_work():
            break
        outs += [o for o in core.step() if o.request_id == "r"]
    assert not core.has_work()
    final = outs[-1]
    assert final.finished and final.outputs[0].finish_reason == "length"
    assert sum(len(o.outputs[0].token_ids) for o in outs) == 9
