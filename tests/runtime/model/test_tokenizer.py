"""The built-in byte-level tokenizer and the incremental detokenizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.runtime.model import build_byte_tokenizer, load_tokenizer
from kvpool.runtime.model.byte_tokenizer import byte_alphabet, learned_merges

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


def _stream(tok, ids):
    det = tok.detokenizer()
    deltas = [det.push(t) for t in ids]
    deltas.append(det.finish())
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
    det2.push(ids[:2])
    assert det2.finish() == "\ufffd"  # a truncated character is flushed as U+FFFD


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
    deltas, _ = _stream(tok, ids[3:])
    assert tok.decode(ids[:3]) + "".join(deltas) == tok.decode(ids)


@pytest.mark.parametrize("kind", ["byte", "llama"])
def test_encode_unlocked_gives_encode_s_ids(kind, hf_dir_factory):
    """The worker-thread encode (the batch call without offsets, tokenizer.py NOTE(fast))
    tokenizes exactly as ``encode``, for the built-in and a trained tokenizer."""
    tok = build_byte_tokenizer() if kind == "byte" else load_tokenizer(hf_dir_factory(kind))
    for text in [*TEXTS[1:], " ".join(TEXTS) * 20]:
        for special in (True, False):
            assert tok.encode_unlocked(text, special) == tok.encode(text, special), text
