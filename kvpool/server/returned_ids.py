"""vLLM's ``return_token_ids``: the token ids of the prompt and of each choice beside the text
(docs/architecture.md "Token ids in the answer"). Where vLLM 0.33 puts them:

============  =====================================  ======================================
              completions                            chat
============  =====================================  ======================================
body          each choice: ``prompt_token_ids``      the body: ``prompt_token_ids``;
              and ``token_ids``                      each choice: ``token_ids``
stream        each choice's first chunk:             each role chunk (one per choice):
              ``prompt_token_ids``; every chunk:     ``prompt_token_ids``; every other
              ``token_ids``, the tokens of its delta  choice chunk: ``token_ids`` (delta)
============  =====================================  ======================================

Not asked, each key is there with null, as vLLM's models dump it. ``token_ids`` holds the
generated tokens only, the eos or stop token that ended the choice included; with completions
``echo`` the prompt's ids are in ``prompt_token_ids``, not there, and the echoed text is left
out of ``text`` (vLLM's rule: the client has the ids). NOTE(echo-only) in parsed_request.py:
the engine's one hidden token is not in ``token_ids`` either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ReturnedIds"]


class ReturnedIds:
    """One request's token ids as its answer shows them; choice ``i`` is prompt ``i // n``'s."""

    def __init__(self, prompts: Sequence[list[int]], n: int, *, chat: bool, on: bool) -> None:
        self.on = on
        self.chat = chat
        self.prompts = prompts
        self.n = n
        self.ids: list[list[int]] = [[] for _ in range(len(prompts) * n)] if on else []
        self.prompt_sent = [False] * len(self.ids)  # completions streams: once per choice

    def add(self, i: int, ids: Sequence[int]) -> None:
        """Choice ``i`` generated ``ids`` (a delta)."""
        if self.on:
            self.ids[i] += ids

    def prompt(self, p: int) -> list[int] | None:
        return list(self.prompts[p]) if self.on else None

    def stream_choice(self, choice: dict[str, Any], i: int, delta: Sequence[int]) -> None:
        """A stream chunk's choice ``i`` gets its keys: ``delta`` its tokens."""
        if not self.chat:
            first = self.on and not self.prompt_sent[i]
            if first:
                self.prompt_sent[i] = True
            choice["prompt_token_ids"] = self.prompt(i // self.n) if first else None
        choice["token_ids"] = list(delta) if self.on else None

    def body_choice(self, choice: dict[str, Any], i: int) -> None:
        """A body's choice ``i`` gets its keys."""
        choice["token_ids"] = list(self.ids[i]) if self.on else None
        if not self.chat:
            choice["prompt_token_ids"] = self.prompt(i // self.n)
