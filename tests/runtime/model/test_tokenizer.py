"""The built-in byte-level tokenizer and the incremental detokenizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.runtime.model import build_byte_tokenizer, load_tokenizer
from kvpool.runtime.model.byte_tokenizer import byte_alphabet, learned_merges
from tests.runtime.text_reference import sentencepiece_tokenizer, sp_byte, vllm_text

TEXTS = [
    "", "a", "Hello, world!", "héllo wörld — ünïcödé", "日本語のテキスト", "emoji 🎉🚀👩‍👩‍👧‍👦 mix",
    "tabs\tand\nnewlines\r\n  spaces   ", "null\x00byte", "<s> looks special </s><pad>",
    "   leading and trailing   ", "🇫🇷 flags and e\u0301 combining", "x" * 500,
]


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer()


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert ids[0] == tok.bos_token_id == 0
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    assert max(ids) < 512


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=120))
def test_round_trip_any_text(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_layout_and_specials(tok):
    assert tok.vocab_size == 512
    assert [tok.token_to_id(s) for s in ("<s>", "</s>", "<pad>")] == [0, 1, 2]
    assert tok.eos_token_ids == (1,) and tok.eos_token_id == 1
    alphabet = byte_alphabet()
    assert len(set(alphabet)) == 256
    assert all(tok.token_to_id(ch) == 3 + b for b, ch in enumerate(alphabet))
    # Merges shorten common text.
    text = "The scheduler stores the blocks of the sequence."
    assert len(tok.encode(text, add_special_tokens=False)) < len(text.encode()) / 2
    # Special-token strings in user text stay text.
    assert 1 not in tok.encode("</s>")


def test_deterministic(tok):
    assert build_byte_tokenizer().backend.to_str() == tok.backend.to_str()


def test_the_merges_are_learned_once_per_process_and_each_build_is_its_own_tokenizer(tok):
    before = learned_merges.cache_info()
    again = build_byte_tokenizer()
    after = learned_merges.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 1
    assert again.backend is not tok.backend  # a fresh tokenizer per engine, same vocabulary
    assert again.backend.to_str() == tok.backend.to_str()
    # another corpus learns its own merges, from scratch
    assert list(learned_merges("abab abab cd", 2)) == [("a", "b"), ("ab", "ab")]


def test_saved_tokenizer_reloads(tok, tmp_path):
    tok.save(tmp_path / "tokenizer.json")
    again = load_tokenizer(tmp_path)
    for text in TEXTS:
        if "<" not in text:  # a reloaded tokenizer matches special strings (transformers' way)
            assert again.encode(text) == tok.encode(text)


def _stream(tok, ids, prompt=()):
    det = tok.detokenizer(prompt_ids=prompt)
    deltas = [det.push(t) for t in ids]
    return deltas, det


@pytest.mark.parametrize("text", TEXTS)
def test_incremental_equals_full_decode(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    deltas, det = _stream(tok, ids)
    assert "".join(deltas) == det.text == text
    assert not any("\ufffd" in d for d in deltas)  # never half a character


def test_incremental_holds_partial_utf8(tok):
    ids = [3 + b for b in "🎉".encode()]  # one token per byte
    det = tok.detokenizer()
    assert [det.push(t) for t in ids[:-1]] == ["", "", ""]
    assert det.push(ids[-1]) == "🎉"
    det2 = tok.detokenizer()
    assert det2.push(ids[:2]) == "" and det2.text == ""  # never flushed (vLLM's rule)
    assert not hasattr(det2, "finish")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=60))
def test_incremental_any_text(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    deltas, _ = _stream(tok, ids)
    assert "".join(deltas) == text


def test_incremental_with_trained_tokenizer(hf_dir_factory):
    tok = load_tokenizer(hf_dir_factory("llama"))
    text = "Greedy decoding picks the most likely token. 🎉 done"
    ids = tok.encode(text)
    deltas, _ = _stream(tok, ids[3:], prompt=ids[:3])
    assert tok.decode(ids[:3]) + "".join(deltas) == tok.decode(ids)


SP = sentencepiece_tokenizer()


def test_sentencepiece_first_token_keeps_its_space_after_the_prompt():
    """NOTE(prompt-context): prompt + completion reads as the text, as in vLLM ("Hello," then
    " world", where a decoder without the prompt strips the space: "world")."""
    prompt, gen = SP.encode("Hello,"), SP.encode("world again", add_special_tokens=False)
    assert SP.id_to_token(gen[0]).startswith("\u2581")
    deltas, det = _stream(SP, gen, prompt)
    assert deltas == vllm_text(SP, prompt, gen)
    assert SP.decode(prompt) + det.text == "Hello, world again" == SP.decode(prompt + gen)


@pytest.mark.parametrize("tok", [build_byte_tokenizer(), SP], ids=["byte-level", "sp"])
def test_a_prompt_ending_inside_a_character(tok):
    """vLLM's stream completes the character the prompt left open; where the prompt's text
    ends in U+FFFD it has no prefix to subtract, so its first delta holds the prompt too."""
    byte = (lambda b: 3 + b) if tok is not SP else (lambda b: sp_byte(SP, b))
    bos = [tok.bos_token_id]
    assert _stream(tok, [byte(0xA9)], bos + [byte(0xC3)])[1].text == "\u00e9"
    prompt, gen = tok.encode("hi") + [byte(0xCB)], [byte(0x87)] + tok.encode("ab", False)
    deltas, det = _stream(tok, gen, prompt)
    assert deltas == vllm_text(tok, prompt, gen)
    assert det.text == tok.decode(prompt + gen) and det.text.startswith("hi\u02c7")


def test_an_invalid_prefix_restarts_without_context():
    """The text rewrote the prefix (DecodeStream's "Invalid prefix": byte fallback turns the
    whole byte run to U+FFFD once 0xB3 makes it invalid, "\\x15" included): vLLM restarts the
    stream with no context; so does the detokenizer."""
    gen = [sp_byte(SP, 0x15), sp_byte(SP, 0xB3), SP.token_to_id("key")]
    assert SP.decode(gen) == "\ufffd\ufffdkey"
    det = SP.detokenizer(True, ())
    assert [det.push(t) for t in gen] == vllm_text(SP, (), gen) == ["\x15", "", "key"]


@pytest.mark.parametrize("tok", [build_byte_tokenizer(), SP], ids=["byte-level", "sp"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_deltas_are_vllm_s_for_random_ids_after_a_prompt(tok, data):
    """Each delta equals vLLM 0.33's (DecodeStream primed with the prompt) for random ids,
    single bytes favoured so characters split across tokens, the prompt and the output."""
    ids = st.integers(0, tok.vocab_size - 1) | st.sampled_from(
        [3 + b for b in range(256)] if tok is not SP else [sp_byte(SP, b) for b in range(256)])
    prompt = data.draw(st.lists(ids, max_size=6), label="prompt")
    gen = data.draw(st.lists(ids, min_size=1, max_size=10), label="generated")
    skip = data.draw(st.booleans(), label="skip_special_tokens")
    det = tok.detokenizer(skip, prompt)
    deltas = [det.push(t) for t in gen]
    assert deltas == vllm_text(tok, prompt, gen, skip) and det.text == "".join(deltas)


@pytest.mark.parametrize("kind", ["byte", "llama"])
def test_encode_unlocked_gives_encode_s_ids(kind, hf_dir_factory):
    """The worker-thread encode (the batch call without offsets, tokenizer.py NOTE(fast))
    tokenizes exactly as ``encode``, for the built-in and a trained tokenizer."""
    tok = build_byte_tokenizer() if kind == "byte" else load_tokenizer(hf_dir_factory(kind))
    for text in [*TEXTS[1:], " ".join(TEXTS) * 20]:
        for special in (True, False):
            assert tok.encode_unlocked(text, special) == tok.encode(text, special), text
