"""Text equals tokens: the joined stream deltas and the final text of every output equal
``tokenizer.decode(generated_ids)``, also for byte-level tokens that never complete a UTF-8
character and for a generation whose first byte continues a character the prompt left open.

Driven through the real OutputProcessor (the step thread's detokenization and finish path) with
the built-in byte tokenizer and a byte-level BPE trained in the test."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.runtime.engine.output_processor import OutputProcessor, Sample
from kvpool.runtime.model import SamplingParams, Tokenizer, build_byte_tokenizer
from kvpool.sched import FinishedRequest, SeqStatus
from kvpool.sched.output import SeqOutput
from tests.configs import engine_config
from tests.runtime.model.helpers import SENTENCES

BYTE = build_byte_tokenizer()


def _trained_bpe() -> Tokenizer:
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(SENTENCES * 4 + ["日本語 héllo wörld 🎉🚀 ünïcödé"] * 4,
                            trainer=trainer)
    return Tokenizer(tok, eos_token_ids=(1,), bos_token_id=0)


BPE = _trained_bpe()


def run_request(tok: Tokenizer, prompt: list[int], outputs: list[list[int]]) -> list[str]:
    """Feed each sequence's ids one step at a time; returns each sequence's joined deltas
    (what a stream shows, and what the server joins into a non-stream body's text)."""
    proc = OutputProcessor(tok)
    params = SamplingParams(n=len(outputs), max_tokens=64)
    seq_ids = tuple(range(10, 10 + len(outputs)))
    proc.add("r", prompt, params, seq_ids, arrival=0.0)
    streamed = ["" for _ in outputs]
    for step in range(max(map(len, outputs))):
        feed = [Sample(s, "r", out[step]) for s, out in zip(seq_ids, outputs) if step < len(out)]
        deltas, stops = proc.on_tokens(feed, now=float(step))
        assert stops == {}
        for c in deltas.get("r", []):
            streamed[c.index] += c.text
    fr = FinishedRequest("r", SeqStatus.FINISHED_LENGTH, None,
                         tuple(SeqOutput(s, out, SeqStatus.FINISHED_LENGTH, "max_tokens")
                               for s, out in zip(seq_ids, outputs)),
                         len(prompt), 0, 0.0, 0.0, 0.0, 1.0, 0, params)
    final = proc.finish(fr, now=2.0)
    for c in final.outputs:
        streamed[c.index] += c.text  # the final update carries the last delta
    return streamed



def test_continuation_byte_after_an_open_prompt_character_is_kept():
    # Regression: the prompt ends with 0xCB (a two-byte lead); the first generated token is the
    # continuation byte 0x87. decode(generated) reads U+FFFD first; with the prompt's tail as
    # context the detokenizer completed the prompt's character and dropped that U+FFFD.
    prompt = BYTE.encode("hi") + [3 + 0xCB]
    gen = [3 + 0x87] + BYTE.encode("ab", add_special_tokens=False)
    assert BYTE.decode(gen) == "\ufffdab"
    assert run_request(BYTE, prompt, [gen]) == ["\ufffdab"]


def test_lone_lead_bytes_at_the_start_and_end():
    gen = [3 + 0xE6, 3 + 0x97] + BYTE.encode("ok", add_special_tokens=False) + [3 + 0xF0]
    assert run_request(BYTE, BYTE.encode("x"), [gen]) == [BYTE.decode(gen)] \
        == ["\ufffdok\ufffd"]


@pytest.mark.parametrize("tok", [BYTE, BPE], ids=["builtin-byte", "trained-bpe"])
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_random_ids_text_equals_decode(tok, data):
    vocab = tok.vocab_size
    ids = st.integers(0, vocab - 1)
    prompt = data.draw(st.lists(ids, min_size=1, max_size=8), label="prompt")
    outs = data.draw(st.lists(st.lists(ids, min_size=1, max_size=12), min_size=1, max_size=3),
                     label="outputs")
    assert run_request(tok, prompt, outs) == [tok.decode(o) for o in outs]


def test_engine_sampled_text_equals_decode():
    """The tiny model's random weights, sampled at temperature 1.5, emit stray bytes; every
    output's joined text equals decode of its joined token ids."""
    async def go():
        eng = AsyncEngine(engine_config("device_only", seed=3))
        await eng.start()
        try:
            prompt = eng.core.tokenizer.encode("The cache \u00e9")
            params = SamplingParams(n=4, max_tokens=40, temperature=1.5, seed=11,
                                    ignore_eos=True)
            ids, texts = [[] for _ in range(4)], ["" for _ in range(4)]
            async for upd in eng.generate("e", prompt, params):
                for c in upd.outputs:
                    ids[c.index] += c.token_ids
                    texts[c.index] += c.text
            return eng.core.tokenizer, ids, texts
        finally:
            await eng.shutdown()

    tok, ids, texts = asyncio.run(go())
    assert all(len(i) == 40 for i in ids)
    assert texts == [tok.decode(i) for i in ids]
