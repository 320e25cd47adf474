"""Every EOS id a model names ends a sequence (NOTE(eos-ids) in kvpool/sched/sequence.py), as
vLLM stops on its tokenizer's eos and on each id of generation_config.json's ``eos_token_id``
(the others with their id as stop_reason). A Llama 3.x Instruct directory names three, and only
the first stopped: its chats ran past <|eot_id|> to max_tokens. The tiny model saved as a
Hugging Face directory, real tensors."""

from __future__ import annotations

import json

import pytest

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams, load_tokenizer, save_tiny_model
from tests.configs import engine_config
from tests.runtime.test_engine_step import merged
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)


@pytest.fixture(scope="module")
def three_eos(tmp_path_factory):
    """The tiny model whose tokenizer's eos is one id and generation_config adds two more."""
    d = save_tiny_model(tmp_path_factory.mktemp("eos") / "m")
    tok = load_tokenizer(d)
    ids = [tok.encode(w)[-1] for w in (" end", " turn", " stop")]
    assert len(set(ids)) == 3
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": ids[1:]}))
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["eos_token"] = tok.decode([ids[0]]).strip()
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    core = EngineCore(engine_config("small", model=str(d), max_num_seqs=4))
    eos = core.tokenizer.eos_token_ids  # the tokenizer's first, then generation_config's;
    assert eos == tuple(ids)  # not config.json's, with that file there (loader NOTE(gen-eos))
    yield core, eos


def run_one(core: EngineCore, params: SamplingParams):
    core.add_request("r", core.tokenizer.encode("paged blocks"), params)
    outs = []
    for _ in range(100):
        if not core.has_work():
            break
        outs += core.step()
    return merged(outs).outputs[0]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_each_eos_id_ends_the_sequence(three_eos, which):
    core, eos = three_eos
    forced = SamplingParams(max_tokens=8, temperature=0.0, logit_bias=((eos[which], 100.0),))
    out = run_one(core, forced)
    assert out.finish_reason == "stop" and out.num_generated == 1, out
    assert out.stop_reason == (None if which == 0 else eos[which])  # vLLM's stop_reason
    out = run_one(core, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True,
                                       logit_bias=((eos[which], 100.0),)))
    assert out.finish_reason == "length" and out.num_generated == 8  # ignore_eos: none stops
    out = run_one(core, SamplingParams(max_tokens=8, temperature=0.0, min_tokens=3,
                                       logit_bias=((eos[which], 100.0),)))
    assert out.num_generated >= 3  # min_tokens holds back every eos id
    assert core.manager.stats().device.num_used == 0 and core.check_invariants()
