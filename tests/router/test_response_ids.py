"""The response-id scanners (kvpool/router/response_ids.py) as properties: any bytes are read
without an exception; a response object's id is found whatever JSON members come before it
(within SCAN_BYTES) and however it is spaced; a stream's id is the first event's that carries
one, however the events are cut into chunks; a kvpool serve answer's own bytes give its id."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.router.response_ids import MAX_EVENTS, SCAN_BYTES, StreamIds, response_id_in

SETTINGS = settings(max_examples=200, deadline=None)
KEYS = st.text(max_size=8).filter(lambda k: k not in ("id", "object"))
VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                      | st.text(max_size=20),
                      lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
IDS = st.text(min_size=1, max_size=256)
SPACING = st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")])


def _object(members: list[tuple[str, object]], spacing: tuple[str, str]) -> str:
    comma, colon = spacing
    return "{" + comma.join(json.dumps(k) + colon + json.dumps(v) for k, v in members) + "}"


@SETTINGS
@given(st.binary(max_size=2048))
def test_any_bytes_are_read_without_an_exception(data):
    response_id_in(data)
    StreamIds().feed(data + b"\n\n")


@SETTINGS
@given(st.lists(st.tuples(KEYS, VALUES), max_size=6), IDS, SPACING, st.booleans())
def test_the_id_is_found_after_any_members(before, rid, spacing, object_first):
    ours = [("object", "response"), ("id", rid)]
    body = _object(before + (ours if object_first else ours[::-1]) + [("z", "x" * 100)],
                   spacing)
    assert len(body.encode()) < SCAN_BYTES
    assert response_id_in(body.encode()) == rid
    event = _object([("type", "response.created"), ("response", json.loads(body))], spacing)
    data = b"".join(b"data: " + line.encode() + b"\n" for line in event.split("\n"))
    assert StreamIds().feed(data + b"\n") == rid  # a data line each (the SSE framing)


@SETTINGS
@given(st.lists(st.tuples(KEYS, VALUES), max_size=6), IDS)
def test_another_object_teaches_nothing(members, rid):
    body = _object(members + [("id", rid), ("object", "chat.completion")], (",", ":"))
    assert response_id_in(body.encode()) is None


def _events(n_before: int, rid: str) -> list[bytes]:
    plain = [b'event: x\ndata: {"type": "x", "n": %d}\n\n' % i for i in range(n_before)]
    ours = json.dumps({"type": "response.created",
                       "response": {"id": rid, "object": "response"}}).encode()
    return [*plain, b"event: response.created\ndata: " + ours + b"\n\n",
            b'data: {"response": {"id": "later", "object": "response"}}\n\n']


@SETTINGS
@given(st.integers(0, MAX_EVENTS + 2), IDS, st.data())
def test_a_stream_gives_the_first_id_within_its_first_events(n_before, rid, data):
    events = _events(n_before, rid)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events) - 1))))
    chunks = [b"".join(events[a:b]) for a, b in zip([0, *cuts], [*cuts, len(events)])]
    ids = StreamIds()
    found = [x for chunk in chunks if (x := ids.feed(chunk)) is not None]
    assert found == ([rid] if n_before < MAX_EVENTS else [])
