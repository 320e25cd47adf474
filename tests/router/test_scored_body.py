"""kvpool/router/scored_body.py NOTE(messages-scored): the body a generation request is placed
by. The placement itself runs against real replicas in test_router_live.py,
test_router_kv_events.py and tests/epp/test_epp_envoy.py."""

from __future__ import annotations

import json
import logging

import pytest

from kvpool.router.scored_body import MESSAGES_PATH, scored_body

BODY = {"model": "m", "max_tokens": 4, "system": "be brief", "future_field": 1,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}


def test_a_messages_body_is_scored_as_its_chat_body_quietly(caplog):
    """The system prompt leads the chat messages; the lookups get that body encoded; an
    unknown field is dropped without the replica's 'ignoring' log line in the router."""
    caplog.set_level(logging.WARNING)
    raw, chat = scored_body(MESSAGES_PATH, json.dumps(BODY).encode(), BODY)
    assert chat is not None and json.loads(raw) == chat
    assert [m["role"] for m in chat["messages"]] == ["system", "user"]
    assert "future_field" not in chat and not caplog.records


@pytest.mark.parametrize("body", [
    {**BODY, "messages": "not a list"}, {**BODY, "max_tokens": -1}, {"model": 7}, None,
    {**BODY, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1:9/x.png"}}]}]},
])
def test_a_body_the_conversion_refuses_is_scored_as_it_came(body):
    """The replica answers it with its own 400; the router neither raises nor changes it."""
    assert scored_body(MESSAGES_PATH, b"raw", body) == (b"raw", body)


def test_other_paths_are_scored_as_they_came():
    assert scored_body("/v1/chat/completions", b"raw", BODY) == (b"raw", BODY)
