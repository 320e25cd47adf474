"""vLLM's repetition_detection (kvpool/runtime/model/repetition.py): the tail check against
its definition, the parameters' rules, and the output processor's stop: first match only,
never before min_tokens, never where an eos, a stop token or max_tokens ends the sequence."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvpool.errors import RequestError
from kvpool.runtime.engine.output_processor import OutputProcessor, Sample
from kvpool.runtime.model import SamplingParams, build_byte_tokenizer
from kvpool.runtime.model.repetition import RepeatStop, tail_repeats
from kvpool.sched import FinishedRequest, SeqStatus
from kvpool.sched.output import SeqOutput

TOK = build_byte_tokenizer()
A, B = 65, 66  # two byte tokens


def defined(ids: list[int], spec: RepeatStop) -> bool:
    """The definition: some length L in range whose last L tokens, taken min_count times,
    are the output's last L * min_count."""
    lo = max(spec.min_pattern_size, 1)
    return spec.max_pattern_size > 0 and any(
        len(ids) >= n * spec.min_count and ids[len(ids) - n * spec.min_count:]
        == ids[len(ids) - n:] * spec.min_count for n in range(lo, spec.max_pattern_size + 1))


specs = st.builds(lambda hi, lo, c: RepeatStop(hi, min(lo, hi), c),
                  st.integers(1, 6), st.integers(0, 6), st.integers(2, 4))


@given(st.lists(st.integers(0, 2), max_size=40), specs)
def test_the_tail_check_is_its_definition(ids, spec):
    assert tail_repeats(ids, spec) == defined(ids, spec)


@pytest.mark.parametrize("fields", [(-1, 0, 2), (2, 3, 2), (2, 0, 1), (2, 0, True),
                                    (1.5, 0, 2)])
def test_vllms_rules_refuse_and_name_the_field(fields):
    with pytest.raises(RequestError) as info:
        RepeatStop(*fields)
    assert info.value.param == "repetition_detection"


def test_max_pattern_size_zero_is_off():
    assert not RepeatStop(0, 0, 0).on and not tail_repeats([A] * 9, RepeatStop(0, 0, 5))


def run(tokens: list[int], end: tuple[SeqStatus, str] = (SeqStatus.FINISHED_LENGTH,
                                                          "max_tokens"),
        **params) -> tuple[int | None, str, str | None, str]:
    """Feed ``tokens`` one step at a time; the step that ended the sequence (None: none did),
    its finish_reason and stop_reason after finish() (``end``: how the scheduler, which owns
    every other stop, finished it: NOTE(child-finish)), and the text the stream showed."""
    proc = OutputProcessor(TOK)
    p = SamplingParams(max_tokens=params.pop("max_tokens", 64), **params)
    proc.add("r", [0, 72], p, (7,), arrival=0.0)
    outs, ended = [], None
    for step, t in enumerate(tokens):
        stops = proc.on_tokens([Sample(7, "r", t)], now=float(step))
        outs += proc.on_judged(()).get("r", [])
        if stops:
            ended = step
            break
    fed = tokens[: len(tokens) if ended is None else ended + 1]
    fr = FinishedRequest("r", end[0], None, (SeqOutput(7, fed, *end),),
                         2, 0, 0.0, 0.0, 0.0, 1.0, 0, p)
    outs += proc.finish(fr, now=99.0).outputs  # none when a stop ended it: NOTE(child-finish)
    return ended, outs[-1].finish_reason, outs[-1].stop_reason, "".join(c.text for c in outs)


LOOP = RepeatStop(max_pattern_size=2, min_count=3)


def test_a_loop_ends_at_its_third_copy_with_every_token_shown():
    ended, finish, stop, text = run([B, A, B, A, B, A, B], repetition_detection=LOOP)
    assert (ended, finish, stop) == (5, "repetition", "repetition_detected")
    assert text == TOK.decode([B, A] * 3)  # nothing cut, unlike a stop string


def test_min_tokens_max_tokens_and_stop_tokens_come_first():
    assert run([A] * 6, repetition_detection=LOOP, min_tokens=5)[:2] == (4, "repetition")
    assert run([A] * 3, repetition_detection=LOOP, max_tokens=3)[:2] == (None, "length")
    by_a = (SeqStatus.FINISHED_STOPPED, f"stop_token {A}")
    ended, finish, stop, _ = run([B, A, A, A, A], by_a, repetition_detection=LOOP,
                                 stop_token_ids=[A])
    assert (ended, finish, stop) == (None, "stop", A)  # a stop token ends it, not this check
    assert run([A] * 4)[:2] == (None, "length")  # not asked: no stop


@given(st.lists(st.sampled_from([A, B, 67]), min_size=1, max_size=30), specs,
       st.integers(0, 8))
def test_the_sequence_ends_at_the_first_token_the_rules_allow(tokens, spec, min_tokens):
    ended, finish, _, _ = run(tokens, repetition_detection=spec, min_tokens=min_tokens)
    first = next((i for i in range(len(tokens)) if i + 1 >= min_tokens
                  and tail_repeats(tokens[: i + 1], spec)), None)
    assert ended == first
    assert finish == ("length" if first is None else "repetition")
