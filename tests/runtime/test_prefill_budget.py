"""Under load a long prompt is prefilled in budget-sized chunks while every running decode
keeps getting one token per step (what bounds TTFT and inter-token latency on a slow model)."""

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config

BUDGET = 32


def test_long_prompt_is_chunked_by_the_budget_and_decodes_are_not_starved():
    core = EngineCore(engine_config("device_only", num_device_blocks=128, max_num_seqs=8,
                                    max_num_batched_tokens=BUDGET, max_model_len=512))
    params = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)
    try:
        for i in range(4):
            core.add_request(f"d{i}", [5 + i] * 6, params)
        core.step()  # the four short prompts: 24 tokens, one step
        core.add_request("long", list(range(3, 303)), SamplingParams(max_tokens=4,
                                                                     temperature=0.0))
        steps = 0
        while True:
            outs = {o.request_id: o for o in core.step()}
            steps += 1
            assert {f"d{i}" for i in range(4)} <= set(outs)  # a token for every decode
            for i in range(4):
                assert sum(len(c.token_ids) for c in outs[f"d{i}"].outputs) == 1
            if "long" in outs:
                break
        # 300 prompt tokens, BUDGET - 4 decodes = 28 per step: the first token comes with the
        # last chunk, never sooner and never later
        assert steps == -(-300 // (BUDGET - 4))
    finally:
        core.close()
