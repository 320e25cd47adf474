"""Text equals tokens, as vLLM 0.33 computes it: the joined stream deltas and the final text of
every output equal vLLM's text for the same prompt P and generated ids G, the deltas of
tokenizers' ``DecodeStream`` primed with P (NOTE(prompt-context) in
kvpool/runtime/model/tokenizer.py; tests/runtime/text_reference.py). Where decode(P) does not
end in U+FFFD and decoding only appends, that is ``decode(P + G[:k])[len(decode(P)):]`` for
the longest G[:k] whose decode does not end in U+FFFD: prompt + text reads as decode(P + G),
and bytes of a character still incomplete at the end are never shown. Where decode(P) ends in
U+FFFD the stream has no prefix to subtract, and the text begins with decode(P) as well.

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
from tests.runtime.text_reference import sentencepiece_tokenizer, sp_byte, vllm_text

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
SP = sentencepiece_tokenizer()


def vllm(tok: Tokenizer, prompt: list[int], out: list[int]) -> str:
    return "".join(vllm_text(tok, prompt, out))


def run_request(tok: Tokenizer, prompt: list[int], outputs: list[list[int]]) -> list[str]:
    """Feed each sequence's ids one step at a time; returns each sequence's joined deltas
    (what a stream shows, and what the server joins into a non-stream body's text)."""
    proc = OutputProcessor(tok)
    # ignore_eos: a random eos mid-output would end the sequence (NOTE(child-finish))
    params = SamplingParams(n=len(outputs), max_tokens=64, ignore_eos=True)
    seq_ids = tuple(range(10, 10 + len(outputs)))
    proc.add("r", prompt, params, seq_ids, arrival=0.0)
    streamed = ["" for _ in outputs]
    for step in range(max(map(len, outputs))):
        feed = [Sample(s, "r", out[step]) for s, out in zip(seq_ids, outputs) if step < len(out)]
        assert proc.on_tokens(feed, now=float(step)) == {}
        deltas = proc.on_judged(())  # no scheduler: none ends before finish()
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



def test_continuation_byte_after_an_open_prompt_character_completes_it():
    # The prompt ends with 0xCB (a two-byte lead); the first generated token is the
    # continuation byte 0x87: vLLM's stream completes the prompt's character, and as the
    # prompt's text ended in U+FFFD it had no prefix to subtract: "hi" comes out too.
    prompt = BYTE.encode("hi") + [3 + 0xCB]
    gen = [3 + 0x87] + BYTE.encode("ab", add_special_tokens=False)
    assert run_request(BYTE, prompt, [gen]) == [vllm(BYTE, prompt, gen)] == ["hi\u02c7ab"]
    assert run_request(BYTE, BYTE.encode("x") + [3 + 0xC3], [[3 + 0xA9]]) == ["x\u00e9"]


def test_lone_lead_bytes_at_the_start_and_end():
    # a lone continuation byte mid-text reads U+FFFD; the open 0xF0 at the end is never shown
    gen = [3 + 0xE6, 3 + 0x97] + BYTE.encode("ok", add_special_tokens=False) + [3 + 0xF0]
    assert run_request(BYTE, BYTE.encode("x"), [gen]) == [vllm(BYTE, BYTE.encode("x"), gen)] \
        == ["\ufffdok"]


@pytest.mark.parametrize("cut", [2, 6])
def test_max_tokens_inside_a_character_shows_no_replacement_character(cut):
    """F1: the output ends inside U+1F600; vLLM holds the bytes back and never flushes them."""
    gen = [3 + b for b in "\U0001F600\U0001F600".encode()][:cut]
    assert run_request(BYTE, BYTE.encode("x"), [gen]) == [vllm(BYTE, BYTE.encode("x"), gen)] \
        == ["\U0001F600"[: cut // 4]]


def test_sentencepiece_output_keeps_the_space_after_the_prompt():
    """F2: "Hello," then "▁world": prompt + text reads as the text (vLLM's " world")."""
    prompt, gen = SP.encode("Hello,"), SP.encode("world", add_special_tokens=False)
    assert run_request(SP, prompt, [gen]) == [vllm(SP, prompt, gen)] == [" world"]
    assert SP.decode(prompt) + run_request(SP, prompt, [gen])[0] == SP.decode(prompt + gen)


def _bytes(tok: Tokenizer) -> list[int]:
    return [sp_byte(SP, b) for b in range(256)] if tok is SP else [3 + b for b in range(256)]


@pytest.mark.parametrize("tok", [BYTE, BPE, SP], ids=["builtin-byte", "trained-bpe", "sp"])
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_random_ids_text_equals_vllm_s(tok, data):
    """Streamed deltas joined == the final text == vLLM's, for random ids after a prompt
    (single bytes favoured where the tokenizer has them, so characters split)."""
    ids = st.integers(0, tok.vocab_size - 1)
    if tok is not BPE:
        ids = ids | st.sampled_from(_bytes(tok))
    prompt = data.draw(st.lists(ids, min_size=1, max_size=8), label="prompt")
    outs = data.draw(st.lists(st.lists(ids, min_size=1, max_size=12), min_size=1, max_size=3),
                     label="outputs")
    assert run_request(tok, prompt, outs) == [vllm(tok, prompt, o) for o in outs]


def test_engine_sampled_text_equals_decode():
    """The tiny model's random weights, sampled at temperature 1.5, emit stray bytes; every
    output's joined text equals vLLM's for its prompt and joined token ids."""
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
            return eng.core.tokenizer, prompt, ids, texts
        finally:
            await eng.shutdown()

    tok, prompt, ids, texts = asyncio.run(go())
    assert all(len(i) == 40 for i in ids)
    assert texts == [vllm(tok, prompt, i) for i in ids]
