"""MergedUpdates (kvpool/server/merged_updates.py): several update streams read as one. For
any streams, each stream's updates come out in its own order, none past its finished one,
each stream ends in exactly one final item (None, or the exception it raised), and nothing
comes after every final item."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.server.merged_updates import MergedUpdates


@dataclass(frozen=True)
class Update:
    stream: int
    seq: int
    finished: bool = False


class Boom(Exception):
    pass


async def _stream(i: int, plan: list[str]):
    """Yields ``plan``'s updates: "u" an update, "f" a finished one, "x" raises, "y" yields
    to the loop (interleaving)."""
    for k, step in enumerate(plan):
        if step == "y":
            await asyncio.sleep(0)
        elif step == "x":
            raise Boom(i)
        else:
            yield Update(i, k, step == "f")


async def _drain(plans: list[list[str]], skip: list[bool]) -> list[tuple[int, object]]:
    merged = MergedUpdates([_stream(i, p) for i, p in enumerate(plans)], skip)
    got = []
    try:
        while True:
            got.append(await merged.get())
    except StopAsyncIteration:
        pass
    await merged.stop()
    return got


def _expected(plan: list[str]) -> tuple[list[int], str]:
    """The updates stream ``plan`` hands out (their seq) and how it ends."""
    seqs = []
    for k, step in enumerate(plan):
        if step == "x":
            return seqs, "raised"
        if step in "uf":
            seqs.append(k)
            if step == "f":
                break
    return seqs, "ended"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from("uufyx"), max_size=8), min_size=1, max_size=5),
       st.data())
def test_each_stream_comes_out_in_order_and_ends_once(plans, data):
    skip = data.draw(st.lists(st.booleans(), min_size=len(plans), max_size=len(plans)))
    got = asyncio.run(_drain(plans, skip))
    for i, plan in enumerate(plans):
        items = [item for j, item in got if j == i]
        if skip[i]:
            assert items == []
            continue
        seqs, end = _expected(plan)
        assert [u.seq for u in items[:-1]] == seqs
        last = items[-1]
        assert isinstance(last, Boom) if end == "raised" else last is None
