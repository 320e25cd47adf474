"""What the router scores a generation request by: its own body, or, for an Anthropic
Messages request, the chat body the replica turns it into, and for a batch chat request its
first conversation's chat body. ``GENERATE_PATHS``: the routes placed so (the router's and
the endpoint picker's).

NOTE(messages-scored): a replica serves ``POST /v1/messages`` by turning the body into a chat
request (kvpool/server/anthropic_input.py ``messages_to_chat``: the system prompt first, then
the turns, tool calls and results as chat messages) and running that. Its prompt, so its
prefix blocks, are the chat body's. The router places the request by that chat body: the
event index hashes it as the replica will (kv_prompt.py), and a lookup is sent the chat body,
which the replicas' lookup reads (it takes completion and chat bodies). Scored as it comes,
the Anthropic body's ``messages`` read as chat without the system prompt, or not at all: a
prediction for some other prompt. A body the conversion refuses is scored as it came (the
replica answers it with its 400). The request itself goes to the replica unchanged.

NOTE(batch-scored): a batch chat request (``POST /v1/chat/completions/batch``,
kvpool/server/route_bodies.py NOTE(batch-chat)) holds several conversations, whose prompts
the replica computes one by one; a batch usually shares its system prompt and instructions.
It is placed by its first conversation, as a chat request of that conversation would be, so a
batch sent again goes where its prefix is. Sent as it came it was placed by load: a body whose
``messages`` is a list of conversations is no chat body, and no lookup scored it.
"""

from __future__ import annotations

import json
from typing import Any

from kvpool.server.anthropic_errors import PREFIX as MESSAGES_PATH  # the replica's route
from kvpool.server.anthropic_input import messages_to_chat
from kvpool.server.field_policy import FieldPolicy

__all__ = ["BATCH_PATH", "GENERATE_PATHS", "MESSAGES_PATH", "scored_body"]

BATCH_PATH = "/v1/chat/completions/batch"
GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions", MESSAGES_PATH, "/invocations",
                  BATCH_PATH)

_FIELDS = FieldPolicy(quiet=True)  # unknown fields: the replica lists them, not the router


def scored_body(path: str, raw: bytes, body: dict[str, Any] | None
                ) -> tuple[bytes, dict[str, Any] | None]:
    """(raw, body) to place a request to ``path`` by (NOTE(messages-scored)): the chat body a
    Messages request becomes, or a batch's first conversation (NOTE(batch-scored)), encoded
    for the lookups; any other request as it came."""
    if path == BATCH_PATH and isinstance(body, dict):
        convs = body.get("messages")
        if isinstance(convs, list) and convs and isinstance(convs[0], list):
            first = {**body, "messages": convs[0]}
            return json.dumps(first).encode(), first
    if path != MESSAGES_PATH or not isinstance(body, dict):
        return raw, body
    try:
        chat, _ = messages_to_chat(body, _FIELDS)
    except Exception:  # noqa: BLE001 - RequestError or worse: the replica answers it
        return raw, body
    return json.dumps(chat).encode(), chat
