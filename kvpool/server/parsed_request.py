"""The result of parsing one generation request; the served name a request's ``model`` asks
for, and the 404 for an unknown one."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvpool.errors import RequestError
from kvpool.runtime.model.sampling import SamplingParams
from kvpool.server.logprob_fields import LogprobRequest
from kvpool.server.vllm_fields import VllmExtras

__all__ = ["ModelNotFoundError", "ParsedRequest", "ServedNames"]

log = logging.getLogger(__name__)


class ModelNotFoundError(RequestError):
    """An unknown ``model``: 404 in OpenAI's error shape (``invalid_request_error``, code
    ``model_not_found``), as every kvpool error is; vLLM 0.33 answers the same 404 with type
    ``NotFoundError`` and code 404 (README "vLLM compatibility")."""

    http_status = 404

    def __init__(self, message: str) -> None:
        super().__init__(message, param="model", code="model_not_found")


class ServedNames:
    """The names a request's ``model`` may give: the served ones and aliases (NOTE(served-name)
    in kvpool/runtime/engine/model_name.py). NOTE(first-name): every one is answered as the
    first served name, as vLLM 0.33 answers (OpenAIModelRegistry.model_name: its first base
    model path, for chat, completions, Responses and Messages alike), whichever was asked."""

    __slots__ = ("names", "aliases", "said")

    def __init__(self, names: Sequence[str], aliases: Mapping[str, str] | None = None) -> None:
        self.names = tuple(dict.fromkeys(n for n in names if n))
        # an alias that is itself served, or stands for a name not served, is no alias
        self.aliases = {a: n for a, n in (aliases or {}).items()
                        if n in self.names and a not in self.names}
        self.said: set[str] = set()  # the aliases whose use was logged (once each)

    def resolve(self, model: Any) -> str:
        """The name an answer to ``model`` shows: the first served name (NOTE(first-name));
        none or "" (vLLM's rule) asks for it too."""
        if model is None or model == "":
            return self.names[0]
        if not isinstance(model, str):
            raise RequestError.field("model", f"must be a string, got {type(model).__name__}")
        if model in self.names:
            return self.names[0]
        if model in self.aliases:
            if model not in self.said:
                self.said.add(model)
                log.warning("a request asked for model %r, kvpool's old name for %r: send %r "
                            "(vLLM's name), or serve it with --served-model-name %s",
                            model, self.aliases[model], self.aliases[model], model)
            return self.names[0]
        raise ModelNotFoundError(f"The model `{model}` does not exist; this server "
                                 f"serves {', '.join(repr(m) for m in self.names)}")


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A validated request, ready for ``engine.generate``."""

    kind: str  # "completion" | "chat"
    model: str  # the served model name echoed back in responses
    prompt_ids: list[int]  # token ids of the first prompt (BOS included when the tokenizer adds)
    params: SamplingParams  # n, max_tokens, sampling, stop
    stream: bool  # SSE instead of one JSON body
    include_usage: bool  # stream_options.include_usage: a final usage chunk
    cache_salt: str | None  # prefix-cache tenant isolation, passed to generate
    priority: int  # scheduling priority, passed to generate
    user: str | None  # end-user id (logged, not used)
    # every prompt, at least one (completions may send several); the first is prompt_ids
    prompts: tuple[list[int], ...]
    prompt_texts: tuple[str | None, ...] = ()  # each prompt as sent, when it was text (echo)
    logprob: LogprobRequest = LogprobRequest()  # logprobs / echo / prompt_logprobs asked for
    # NOTE(echo-only): completions ``echo`` with ``max_tokens: 0`` (lm-eval's loglikelihood
    # request): the prompt and its logprobs only. The engine runs one token (vLLM does the
    # same) that the response never shows: no text, no logprobs, 0 completion tokens.
    echo_only: bool = False
    ignored: tuple[str, ...] = ()  # unknown body fields that were ignored (body_fields.py)
    extras: VllmExtras = VllmExtras()  # vLLM's prompt / response-shape fields (vllm_fields.py)
    continuous_usage: bool = False  # stream_options.continuous_usage_stats: usage per chunk
    return_n: int | None = None  # best_of > n: params.n = best_of run, the n best returned
    echo_text: str = ""  # chat echo: the final assistant message, in front of the content
    # each prompt's own echo_text where they differ (route_bodies.py NOTE(batch-chat)), or ()
    echo_texts: tuple[str, ...] = ()
    tools: Any = None  # tools.request.ToolRequest whose output is read for calls, or None
    reasoning: Any = None  # reasoning.ReasoningRequest (chat, --reasoning-parser), or None
    # each prompt's max_tokens where they differ (NOTE(clamp) in context_budget.py: each is
    # clamped to the room its prompt leaves); () when params.max_tokens holds for every prompt
    budgets: tuple[int, ...] = ()
    request_id: str | None = None  # the body's request_id (request_ids.py): the shown id
    prompt_text: str | None = None  # chat return_prompt_text: the template's text (vllm_fields)

    def echo_at(self, p: int) -> str:
        """Prompt ``p``'s chat echo (``echo_texts``, else the one ``echo_text``)."""
        return self.echo_texts[p] if self.echo_texts else self.echo_text

    def params_at(self, i: int) -> SamplingParams:
        """Prompt ``i``'s SamplingParams: ``params`` with its own max_tokens (NOTE(clamp));
        a default one is kept whole, n sequences that cannot hold it together running as
        child requests (NOTE(apart) in kvpool/sched/request_checker.py)."""
        m = self.params.max_tokens if not self.budgets else self.budgets[i]
        return self.params if m == self.params.max_tokens else \
            dataclasses.replace(self.params, max_tokens=m)
