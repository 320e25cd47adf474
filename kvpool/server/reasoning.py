"""``--reasoning-parser NAME``: a reasoning model's thinking, read apart from its answer.

The think-tag family (vLLM 0.33's ``deepseek_r1``, its alias ``step5``, ``qwen3`` and
``deepseek_v3``) writes its reasoning first and closes it with ``</think>``; the answer
follows::

    <think>The user wants 2 + 2.</think>It is 4.    ->  reasoning "The user wants 2 + 2."
                                                        content   "It is 4."

Rules, vLLM's (docs/architecture.md "Reasoning output"):

- the output opens inside the reasoning, whether the model writes ``<think>`` (Qwen3) or the
  template already did (DeepSeek-R1); ``qwen3`` opens in the answer instead when the template
  was told ``enable_thinking: false`` (chat_template_kwargs, or ``reasoning_effort: none``),
  and ``deepseek_v3`` (DeepSeek V3.1 and later, whose thinking is off by default) only when
  it was told ``thinking`` or ``enable_thinking`` true;
- a ``<think>`` inside the reasoning is dropped; the first ``</think>`` ends it; an output that
  never closes it is all reasoning (content null);
- ``include_reasoning: false`` (a chat field, default true) drops the reasoning;
- a grammar (structured outputs, a forced tool call) constrains the tokens after the end tag
  (NOTE(think-grammar) in kvpool/runtime/model/grammar_matchers.py), and an auto tool parser
  reads the answer only;
- chat usage counts the reasoning's tokens, ``completion_tokens_details.reasoning_tokens``;
- ``thinking_token_budget`` (a chat field: an integer >= 0, -1 for none) ends the thinking
  after that many tokens by forcing ``</think>`` (NOTE(think-budget) in
  kvpool/runtime/engine/row_sampler.py); without ``--reasoning-parser`` it is a 400, as vLLM
  answers it.

Both tags must be tokens of the model's vocabulary (a startup error otherwise, as in vLLM).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kvpool.errors import ConfigError, RequestError
from kvpool.server.body_fields import opt
from kvpool.server.tools.stream import partial_marker

__all__ = ["PARSERS", "ReasoningParser", "ReasoningRequest", "ThinkStream", "read_reasoning",
           "with_reasoning"]
BUDGET = "thinking_token_budget"

START, END = "<think>", "</think>"


def _always(kw: dict[str, Any]) -> bool:
    return True


def _unless_off(kw: dict[str, Any]) -> bool:
    return kw.get("enable_thinking", True) is not False


def _when_on(kw: dict[str, Any]) -> bool:
    return bool(kw.get("thinking")) or bool(kw.get("enable_thinking"))


# name -> whether an output opens in its thinking, given the template's kwargs (vLLM's rules)
PARSERS = {"deepseek_r1": _always, "step5": _always, "qwen3": _unless_off,
           "deepseek_v3": _when_on}


class ReasoningParser:
    """One served model's think tags: their ids in its vocabulary."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        if name not in PARSERS:
            raise ConfigError(f"--reasoning-parser {name}: use one of "
                              f"{', '.join(sorted(PARSERS))}")
        self.name = name
        # whether an output opens inside the reasoning, given what the template was told
        self.opens_inside = PARSERS[name]
        ids = [tokenizer.token_to_id(t) for t in (START, END)]
        if None in ids:
            raise ConfigError(f"--reasoning-parser {name}: the model's tokenizer has no "
                              f"{START} / {END} tokens; serve a reasoning model that has them, "
                              "or leave the flag out")
        self.start_id, self.end_id = ids

    def request(self, template_kwargs: dict[str, Any], include: bool) -> ReasoningRequest:
        return ReasoningRequest(self, self.opens_inside(template_kwargs), include)


@dataclass(frozen=True, slots=True)
class ReasoningRequest:
    """What one chat request reads apart: ``inside``, whether its output opens in the
    reasoning; ``include``, include_reasoning."""

    parser: ReasoningParser
    inside: bool
    include: bool = True

    @property
    def grammar_after(self) -> int | None:
        """NOTE(think-grammar): the token a grammar waits for: the end tag's while the output
        opens in reasoning, shown or not (vLLM constrains from the first token when
        include_reasoning is false; hiding the thinking should not stop it); else None."""
        return self.parser.end_id if self.inside else None

    def gate(self, spec: Any) -> Any:
        """``spec`` (a GrammarSpec or None) waiting for ``grammar_after``."""
        after = self.grammar_after
        return spec if spec is None or after is None else dataclasses.replace(spec, after=after)

    def split(self, text: str) -> tuple[str | None, str | None]:
        """(reasoning, content) of a whole output, as its stream's parts join; reasoning None
        unless included, content None while the reasoning never ended."""
        if not self.inside:
            return None, text
        s = self.stream()
        parts = s.feed(text) + s.finish()
        reasoning = "".join(v for k, v in parts if k == "reasoning") if self.include else None
        content = "".join(v for k, v in parts if k == "content")
        return reasoning, content or None

    def stream(self) -> ThinkStream:
        return ThinkStream(self.inside)

    def count(self, ids: tuple[int, ...] | list[int]) -> tuple[int, bool]:
        """(reasoning tokens among ``ids``, whether the end tag is among them): ``ids`` are a
        choice's next tokens while its reasoning is open. Tags are not counted."""
        end, start = self.parser.end_id, self.parser.start_id
        n = 0
        for t in ids:
            if t == end:
                return n, True
            n += t != start
        return n, False


class ThinkStream:
    """One streamed choice's text -> ("reasoning" | "content", piece) parts. ``held``: what
    may be the start of a tag, waiting for the next piece; the parts join to ``split``'s."""

    def __init__(self, inside: bool) -> None:
        self.inside = inside
        self.held = ""

    def feed(self, piece: str) -> list[tuple[str, str]]:
        if not self.inside:
            return [("content", piece)] if piece else []
        text, self.held = self.held + piece, ""
        if "<" not in text:  # no tag, nor the start of one: the common piece, at once
            return [("reasoning", text)] if text else []
        reasoning, tag, content = text.partition(END)
        if tag:
            self.inside = False
            return _parts(reasoning.replace(START, ""), content)
        keep = partial_marker(reasoning, (START, END))
        self.held = reasoning[len(reasoning) - keep:] if keep else ""
        return _parts(reasoning[:len(reasoning) - keep].replace(START, ""), "")

    def finish(self) -> list[tuple[str, str]]:
        """The end of the output: a held tail that never became a tag is reasoning."""
        held, self.held = self.held, ""
        return _parts(held, "")


def read_reasoning(req: Any, body: dict[str, Any], parser: ReasoningParser | None,
                   template_kwargs: Any) -> Any:
    """A chat ParsedRequest read by the server's ``parser`` (None: as it is), with the body's
    include_reasoning and thinking_token_budget."""
    budget = _budget(body.get(BUDGET))
    if parser is None:
        if budget is not None:
            raise RequestError.field(BUDGET, "needs a reasoning model served with "
                                     "--reasoning-parser")
        return req
    reasoning = parser.request(dict(template_kwargs), opt(body, "include_reasoning", bool, True))
    return with_reasoning(req, reasoning, budget)


def _budget(value: Any) -> int | None:
    """thinking_token_budget as vLLM reads it: an integer >= 0; -1 or null, none."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise RequestError.field(BUDGET, "must be a non-negative integer or -1 for unlimited")
    return None if value == -1 else value


def with_reasoning(req: Any, reasoning: ReasoningRequest, budget: int | None = None) -> Any:
    """``req`` (a chat ParsedRequest) read by ``reasoning``: its grammar gated
    (NOTE(think-grammar)), its thinking bounded by ``budget`` where it opens thinking."""
    params = req.params
    spec = reasoning.gate(params.response_format)
    if spec is not params.response_format:
        params = dataclasses.replace(params, response_format=spec)
    if budget is not None and reasoning.inside:
        p = reasoning.parser
        params = dataclasses.replace(params, think_budget=(budget, p.start_id, p.end_id))
    return dataclasses.replace(req, reasoning=reasoning, params=params)


def _parts(reasoning: str, content: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in (("reasoning", reasoning), ("content", content)) if v]
