"""The reasoning effort ``thinking: {"type": "disabled"}`` asks the chat template for, as
vLLM 0.33 picks it (its ``--anthropic-disabled-thinking-effort``; docs/architecture.md "The
Messages API").

NOTE(disabled-effort): ``none`` tells a template that honours it to skip thinking
(``enable_thinking`` false), but a template that always thinks may read an effort it does not
know as its most (GLM-5.3's reads ``none`` as ``max``) or refuse it. So with ``auto``, the
flag's default, the first Messages or count_tokens request with thinking disabled renders
[user "Hi"] at reasoning_effort ``none`` and at each of low, medium, high, xhigh, max (the
server's --default-chat-template-kwargs under them, as vLLM's probe renders): when ``none``
fails to render, or renders the same tokens as one of those efforts, disabled thinking is
``low``; else ``none``. The answer is kept for the server's life and logged once, as vLLM
keeps and logs it. Any other value of the flag is used as given, unprobed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kvpool.server.anthropic_input import EFFORTS

__all__ = ["DISABLED_EFFORT_CHOICES", "DisabledThinkingEffort"]

log = logging.getLogger(__name__)

DISABLED_EFFORT_CHOICES = ("auto", "none", *EFFORTS)  # the flag's values, vLLM's


class DisabledThinkingEffort:
    """The effort of disabled thinking for one server (NOTE(disabled-effort)); ``render``:
    the prompt ids of the probe chat at a reasoning effort (any exception: it refuses it)."""

    def __init__(self, render: Callable[[str], list[int]], option: str = "auto") -> None:
        if option not in DISABLED_EFFORT_CHOICES:
            raise ValueError(f"disabled thinking effort {option!r}: use one of "
                             f"{', '.join(DISABLED_EFFORT_CHOICES)}")
        self.render = render
        self._effort = None if option == "auto" else option
        self._lock = threading.Lock()  # parse-pool threads ask at once: one probe

    def resolve_for(self, body: Any) -> str:
        """The reasoning effort a Messages body's disabled thinking becomes (probed on the
        first such body); "none" for any other body (it is not used there)."""
        thinking = body.get("thinking") if isinstance(body, dict) else None
        if not (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
            return "none"
        with self._lock:
            if self._effort is None:
                self._effort = self._probe()
                log.info("Anthropic thinking.type=disabled maps to reasoning_effort=%r "
                         "(NOTE(disabled-effort))", self._effort)
            return self._effort

    def _probe(self) -> str:
        none = self._ids("none")
        if none is None or any(self._ids(effort) == none for effort in EFFORTS):
            return "low"
        return "none"

    def _ids(self, effort: str) -> list[int] | None:
        try:
            return self.render(effort)
        except Exception:  # noqa: BLE001 - a template is untrusted code: any failure refuses
            log.debug("rendering reasoning_effort=%r failed", effort, exc_info=True)
            return None
