"""vLLM's stream_interval in the output processor (NOTE(interval)): a sequence's first update
goes out at once, each later one once the interval's tokens wait, the last at the end; the
engine's --stream-interval is a floor a request may raise; nothing is lost or reordered."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvpool.runtime.engine.output_processor import OutputProcessor, Sample
from kvpool.runtime.model import SamplingParams, build_byte_tokenizer
from kvpool.sched import FinishedRequest, SeqStatus
from kvpool.sched.output import SeqOutput
from tests.runtime.text_reference import vllm_text

TOK = build_byte_tokenizer()


def updates(tokens: list[int], engine: int, asked: int, stop: tuple[str, ...] = ()
            ) -> list[tuple[tuple[int, ...], str]]:
    """(ids, text) of each update one sequence's stream gets for ``tokens``."""
    proc = OutputProcessor(TOK, stream_interval=engine)
    p = SamplingParams(max_tokens=64, stream_interval=asked, stop=stop)
    proc.add("r", [0, 72], p, (3,), arrival=0.0)
    got = []
    for step, t in enumerate(tokens):
        proc.on_tokens([Sample(3, "r", t)], now=float(step))
        deltas = proc.on_judged(())  # no scheduler: none ends before finish()
        got += [(c.token_ids, c.text) for c in deltas.get("r", [])]
    fr = FinishedRequest("r", SeqStatus.FINISHED_LENGTH, None,
                         (SeqOutput(3, tokens, SeqStatus.FINISHED_LENGTH, "max_tokens"),),
                         2, 0, 0.0, 0.0, 0.0, 1.0, 0, p)
    (last,) = proc.finish(fr, now=99.0).outputs
    return got + [(last.token_ids, last.text)]


@given(st.lists(st.integers(3, 258), min_size=1, max_size=40), st.integers(1, 5),
       st.integers(1, 5))
def test_first_at_once_then_every_interval_then_the_rest(tokens, engine, asked):
    every = max(engine, asked)
    got = updates(tokens, engine, asked)
    sizes = [len(ids) for ids, _ in got]
    assert sizes[0] == 1 and all(n == every for n in sizes[1:-1]) and sizes[-1] <= every
    assert [t for ids, _ in got for t in ids] == tokens
    assert "".join(text for _, text in got) == "".join(vllm_text(TOK, [0, 72], tokens))


def test_one_is_every_token_and_a_stop_string_still_holds_back():
    x = TOK.encode("x", add_special_tokens=False)[0]
    assert [len(ids) for ids, _ in updates([x] * 5, 1, 1)] == [1, 1, 1, 1, 1, 0]
    chars = [TOK.encode(c, add_special_tokens=False)[0] for c in "abcdefg"]
    got = updates(chars, 1, 3, stop=("zz",))
    assert [text for _, text in got] == ["", "abc", "def", "g"]  # "z" may still start "zz"
