"""Stop strings decided as vLLM's detokenizer decides them (NOTE(stop-strings) in
kvpool/runtime/engine/output_processor.py), on the tiny model's greedy output with real tensors:
none ends a sequence before ``min_tokens`` tokens, and of two that a token completes the one
that ends first wins (it was the one that started first)."""

from __future__ import annotations

from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.engine.output_processor import OutputProcessor, Sample
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config
from tests.runtime.test_engine_step import merged, run
from tests.runtime.text_reference import sentencepiece_tokenizer
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

GREEDY = dict(max_tokens=24, temperature=0.0, ignore_eos=True)


def vllm_stop(texts: list[str], stops: tuple[str, ...], min_tokens: int):
    """vLLM 0.33's check_stop_strings, one token at a time (``texts[n]``: the text after n
    tokens): (tokens, text, stop string) of the sequence it ends, or None."""
    for n in range(min_tokens + 1, len(texts)):
        full, new = texts[n], len(texts[n]) - len(texts[n - 1])
        ends = [(i + len(s), k, i, s) for k, s in enumerate(stops)
                if new and (i := full.find(s, max(0, len(full) - new - len(s) + 1))) >= 0]
        if ends:
            _, _, i, s = min(ends)
            return n, full[:i], s
    return None


def greedy_texts(core: EngineCore) -> list[str]:
    ref = merged(run(core, {"ref": SamplingParams(**GREEDY)})["ref"]).outputs[0]
    ids = list(ref.token_ids)
    texts = [core.tokenizer.decode(ids[:n]) for n in range(len(ids) + 1)]
    assert texts[-1] == ref.text
    return texts


def ended(core: EngineCore, stops: tuple[str, ...], min_tokens: int = 0):
    out = merged(run(core, {"s": SamplingParams(**GREEDY, stop=stops,
                                                min_tokens=min_tokens)})["s"]).outputs[0]
    return out.num_generated, out.text, out.stop_reason


def test_no_stop_string_ends_a_sequence_before_min_tokens():
    core = EngineCore(engine_config("small", max_num_seqs=4, max_num_batched_tokens=256))
    texts = greedy_texts(core)
    n = next(k for k in range(2, 12) if texts[k] != texts[k - 1]
             and texts[k][len(texts[k - 1]):].strip() not in texts[k - 1])
    stop = (texts[n][len(texts[n - 1]):].strip(),)  # what token n writes, not written before
    assert ended(core, stop)[0] == n  # without min_tokens: the token that completes it
    for min_tokens in (n, 10, 20):
        want = vllm_stop(texts, stop, min_tokens)
        got = ended(core, stop, min_tokens)
        assert got[0] > min_tokens, (min_tokens, got)
        assert got == (want if want else (24, texts[-1], None)), (min_tokens, got, want)
    assert core.manager.stats().device.num_used == 0 and core.check_invariants()


def test_of_two_stop_strings_one_token_completes_the_one_that_ends_first_wins():
    core = EngineCore(engine_config("small", max_num_seqs=4, max_num_batched_tokens=256))
    texts = greedy_texts(core)
    n = next(k for k in range(2, 20) if len(texts[k]) - len(texts[k - 1]) >= 2
             and texts[k - 1] and texts[k][len(texts[k - 1]):-1] not in texts[k - 1])
    piece = texts[n][len(texts[n - 1]):]
    late, early = texts[n], piece[:-1]  # both completed by token n; early ends a char sooner
    for stops in ((late, early), (early, late)):
        assert ended(core, stops) == (n, texts[n - 1], early) == vllm_stop(texts, stops, 0)


def test_a_stop_string_may_begin_with_the_space_the_prompt_context_gives():
    """SentencePiece: the first generated "▁quick" reads " quick" after the prompt (vLLM's
    text, NOTE(prompt-context)), so the stop string " " ends the sequence at token 1 with
    no text, as in vLLM; decoded without the prompt it read "quick" and stopped a token late."""
    tok = sentencepiece_tokenizer()
    prompt, gen = tok.encode("Hello"), tok.encode("quick quick", add_special_tokens=False)
    assert tok.id_to_token(gen[0]).startswith("\u2581")
    proc = OutputProcessor(tok)
    proc.add("r", prompt, SamplingParams(max_tokens=8, stop=[" "]), (7,), arrival=0.0)
    stops = proc.on_tokens([Sample(7, "r", gen[0])], now=0.0)
    assert stops == {7: " "}
    deltas = proc.on_judged(())  # the stop string ends it, with no scheduler's report
    assert [(c.text, c.finish_reason, c.stop_reason) for c in deltas["r"]] == [("", "stop", " ")]
