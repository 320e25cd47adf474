"""``--reasoning-parser NAME``: a reasoning model's thinking, read apart from its answer.

A reasoning model writes its thinking between a start and an end tag and its answer after::

    <think>The user wants 2 + 2.</think>It is 4.    ->  reasoning "The user wants 2 + 2."
                                                        content   "It is 4."

The parsers (vLLM 0.33's names) differ in their tags and in when an output opens in its
thinking (docs/architecture.md "Reasoning output"):

| parser | tags | the output opens in its thinking |
|---|---|---|
| ``deepseek_r1``, ``step3``, ``step5``, ``minimax_m2`` | ``<think>`` ``</think>`` | always |
| ``qwen3`` | ``<think>`` ``</think>`` | unless told ``enable_thinking`` false |
| ``seed_oss`` | ``<seed:think>`` ``</seed:think>`` | as ``qwen3`` |
| ``glm45``, ``kimi_k2`` | ``<think>`` ``</think>`` | unless told ``thinking`` or |
| | | ``enable_thinking`` and neither true |
| ``deepseek_v3`` | ``<think>`` ``</think>`` | only when told either true |
| ``mistral`` | ``[THINK]`` ``[/THINK]`` | never: each ``[THINK]`` of the answer opens one |
| ``granite`` | "Here is my thought process:" | where it starts with that text (told |
| | "Here is my response:" (text) | ``thinking`` or not); reasoning_text.py |

"Told" is the template's chat_template_kwargs (``reasoning_effort: none`` tells it
``enable_thinking`` false).

- the output opens inside the reasoning whether the model writes the start tag (Qwen3) or the
  template already did (DeepSeek-R1);
- a start tag inside the reasoning is dropped; the first end tag ends it; an output that
  never closes it is all reasoning (content null); after it, the rest is the answer, tags and
  all, except for ``mistral``, whose answer may open a thinking again;
- ``include_reasoning: false`` (a chat field, default true) drops the reasoning;
- a grammar (structured outputs, a forced tool call) constrains the tokens after the end tag
  (NOTE(think-grammar) in kvpool/runtime/model/grammar_matchers.py), and an auto tool parser
  reads the answer only;
- chat usage counts the reasoning's tokens, ``completion_tokens_details.reasoning_tokens``;
- ``thinking_token_budget`` (a chat field: an integer >= 0, -1 for none) ends the thinking
  after that many tokens by forcing the end tag (NOTE(think-budget) in
  kvpool/runtime/engine/row_sampler.py); under ``mistral`` the thinkings the answer opens
  share it; without ``--reasoning-parser`` it is a 400, as vLLM answers it.

Both tags must be tokens of the model's vocabulary (a startup error otherwise, as in vLLM);
``granite``'s markers are text that reasoning_text.py reads.
Where they are special tokens, a request that does not send ``skip_special_tokens`` keeps
them in its text (vLLM sets it false for its parsers too), or the tags could not be read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from kvpool.errors import ConfigError, RequestError
from kvpool.server.body_fields import opt
from kvpool.server.reasoning_text import TEXT_PARSERS, MarkerCount, Markers, MarkerStream
from kvpool.server.tools.stream import partial_marker

__all__ = ["Family", "NAMES", "PARSERS", "ReasoningParser", "ReasoningRequest", "ThinkStream",
           "read_reasoning", "with_reasoning"]
BUDGET = "thinking_token_budget"


def _always(kw: dict[str, Any]) -> bool:
    return True


def _unless_off(kw: dict[str, Any]) -> bool:
    return kw.get("enable_thinking", True) is not False


def _when_on(kw: dict[str, Any]) -> bool:
    return bool(kw.get("thinking")) or bool(kw.get("enable_thinking"))


def _unless_told_off(kw: dict[str, Any]) -> bool:
    return (kw.get("thinking") is None and kw.get("enable_thinking") is None) or _when_on(kw)


def _never(kw: dict[str, Any]) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Family:
    """A parser's rule (whether an output opens in its thinking, given the template's
    kwargs), its tags, and whether a start tag in the answer opens a thinking (then the
    output opens in its answer: the rule is ``_never``)."""

    opens: Callable[[dict[str, Any]], bool]
    start: str = "<think>"
    end: str = "</think>"
    reopens: bool = False

    @property
    def may_open(self) -> bool:
        """Whether an output that does not open in a thinking may still open one."""
        return self.reopens

    def stream(self, inside: bool) -> ThinkStream:
        return ThinkStream(self, inside)

    def counter(self, inside: bool, tokenizer: Any) -> bool:
        """A choice's first state for ``ReasoningRequest.count``: whether it is inside."""
        return inside


PARSERS = {"deepseek_r1": Family(_always), "step5": Family(_always), "step3": Family(_always),
           "minimax_m2": Family(_always), "qwen3": Family(_unless_off),
           "seed_oss": Family(_unless_off, "<seed:think>", "</seed:think>"),
           "glm45": Family(_unless_told_off), "kimi_k2": Family(_unless_told_off),
           "deepseek_v3": Family(_when_on),
           "mistral": Family(_never, "[THINK]", "[/THINK]", reopens=True)}
NAMES = sorted({*PARSERS, *TEXT_PARSERS})  # --reasoning-parser's choices


class ReasoningParser:
    """One served model's reasoning parser: its family and its tags' ids in the vocabulary."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        if name not in NAMES:
            raise ConfigError(f"--reasoning-parser {name}: use one of {', '.join(NAMES)}")
        self.name = name
        self.family: Family | Markers = PARSERS.get(name) or TEXT_PARSERS[name]
        # whether an output opens inside the reasoning, given what the template was told
        self.opens_inside = self.family.opens
        self.tokenizer = tokenizer  # a text-marker parser's count reads each token's text
        self.start_id = self.end_id = None  # NOTE(granite-markers): text markers have none
        self.keeps_special_tokens = False
        if isinstance(self.family, Family):
            self._tag_ids(tokenizer)

    def _tag_ids(self, tokenizer: Any) -> None:
        name = self.name
        tags = (self.family.start, self.family.end)
        ids = [tokenizer.token_to_id(t) for t in tags]
        if None in ids:
            raise ConfigError(f"--reasoning-parser {name}: the model's tokenizer has no "
                              f"{tags[0]} / {tags[1]} tokens; serve a reasoning model that has "
                              "them, or leave the flag out")
        self.start_id, self.end_id = ids
        # special tags (Mistral's [THINK]) leave decoded text unless the request keeps them
        self.keeps_special_tokens = any(tokenizer.decode([i]) == "" for i in ids)

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
    def reopens(self) -> bool:
        """Whether the answer may open a thinking (Mistral's): then the output may think
        though it opens in the answer."""
        return self.parser.family.reopens

    @property
    def grammar_after(self) -> int | None:
        """NOTE(think-grammar): the token a grammar waits for: the end tag's while the output
        opens in reasoning, shown or not (vLLM constrains from the first token when
        include_reasoning is false; hiding the thinking should not stop it); else None."""
        return self.parser.end_id if self.inside else None

    def gate(self, spec: Any) -> Any:
        """``spec`` (a GrammarSpec or None) waiting for ``grammar_after``; a 400 where the
        thinking that opens ends at a text marker, not a token (NOTE(granite-markers))."""
        after = self.grammar_after
        if spec is not None and self.inside and after is None:
            raise RequestError(f"--reasoning-parser {self.parser.name}: a grammar "
                               "(response_format, structured_outputs, a forced tool call) "
                               "cannot wait for a thinking that a text marker ends, not one "
                               "token; send chat_template_kwargs thinking false for a grammar "
                               "over the whole answer")
        return spec if spec is None or after is None else dataclasses.replace(spec, after=after)

    def split(self, text: str) -> tuple[str | None, str | None]:
        """(reasoning, content) of a whole output, as its stream's parts join; reasoning None
        unless included and a thinking opened; where one did, content None where empty."""
        if not self.inside and not self.parser.family.may_open:
            return None, text
        s = self.stream()
        parts = s.feed(text) + s.finish()
        reasoning = "".join(v for k, v in parts if k == "reasoning")
        content = "".join(v for k, v in parts if k == "content")
        if not s.opened:  # no thinking: the answer as it is, as without a parser
            return None, content
        return (reasoning if self.include else None), (content or None)

    def stream(self) -> ThinkStream | MarkerStream:
        return self.parser.family.stream(self.inside)

    def counter(self) -> bool | MarkerCount:
        """A choice's first state for ``count``: whether its reasoning is open (a tag family),
        or the text reader of a text-marker family (each choice its own)."""
        return self.parser.family.counter(self.inside, self.parser.tokenizer)

    def count(self, ids: tuple[int, ...] | list[int],
              inside: bool | MarkerCount) -> tuple[int, bool | MarkerCount]:
        """(reasoning tokens among ``ids``, the state after them): ``ids`` are a choice's next
        tokens, ``inside`` its state before them (``counter``'s, then this method's: whether
        its reasoning is open, or a text-marker reader). Tags are not counted."""
        if isinstance(inside, MarkerCount):
            return inside.count(ids)
        end, start, reopens = self.parser.end_id, self.parser.start_id, self.reopens
        n = 0
        for t in ids:
            if inside:
                inside = t != end
                n += inside and t != start
            elif not reopens:
                break
            else:
                inside = t == start
        return n, inside


class ThinkStream:
    """One streamed choice's text -> ("reasoning" | "content", piece) parts. ``held``: what
    may be the start of a tag, waiting for the next piece; the parts join to ``split``'s."""

    def __init__(self, family: Family, inside: bool) -> None:
        self.family = family
        self.inside = inside
        self.opened = inside  # whether a thinking was open at any point
        self.held = ""
        self._lead, self._lead_end = family.start[0], family.end[0]  # no tag without them

    def feed(self, piece: str) -> list[tuple[str, str]]:
        if not self.inside and not self.family.reopens:
            return [("content", piece)] if piece else []
        text, self.held = self.held + piece, ""
        if self._lead not in text and self._lead_end not in text:  # the common piece, at once
            return [("reasoning" if self.inside else "content", text)] if text else []
        out: list[tuple[str, str]] = []
        while text:
            tag = self.family.end if self.inside else self.family.start
            before, found, text = text.partition(tag)
            if not found:
                text = before
                break
            out += self._part(before)
            self.inside = not self.inside
            self.opened = self.opened or self.inside
            if not self.inside and not self.family.reopens:
                return out + _parts("", text)
        tags = (self.family.start, self.family.end) if self.inside else (self.family.start,)
        keep = partial_marker(text, tags)
        self.held = text[len(text) - keep:] if keep else ""
        return out + self._part(text[:len(text) - keep])

    def _part(self, text: str) -> list[tuple[str, str]]:
        """``text`` read in the current state (no tag that changes it): a start tag inside
        the reasoning is dropped."""
        if self.inside:
            return _parts(text.replace(self.family.start, ""), "")
        return _parts("", text)

    def finish(self) -> list[tuple[str, str]]:
        """The end of the output: a held tail that never became a tag is read as it is."""
        held, self.held = self.held, ""
        return self._part(held)


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
    if budget is not None and parser.end_id is None:  # NOTE(granite-markers); vLLM: 400 too
        raise RequestError.field(BUDGET, f"--reasoning-parser {parser.name} ends a thinking "
                                 "at a text marker, not a token it could force")
    reasoning = parser.request(dict(template_kwargs), opt(body, "include_reasoning", bool, True))
    req = with_reasoning(req, reasoning, budget)
    if parser.keeps_special_tokens and "skip_special_tokens" not in body:  # vLLM's rule too
        req = dataclasses.replace(req, params=dataclasses.replace(req.params,
                                                                  skip_special_tokens=False))
    return req


def _budget(value: Any) -> int | None:
    """thinking_token_budget as vLLM reads it: an integer >= 0; -1 or null, none."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise RequestError.field(BUDGET, "must be a non-negative integer or -1 for unlimited")
    return None if value == -1 else value


def with_reasoning(req: Any, reasoning: ReasoningRequest, budget: int | None = None) -> Any:
    """``req`` (a chat ParsedRequest) read by ``reasoning``: its grammar gated
    (NOTE(think-grammar)), its thinking bounded by ``budget`` where it opens thinking or
    where its answer may open one (NOTE(think-budget))."""
    params = req.params
    spec = reasoning.gate(params.response_format)
    if spec is not params.response_format:
        params = dataclasses.replace(params, response_format=spec)
    if budget is not None and (reasoning.inside or reasoning.reopens):
        p = reasoning.parser
        params = dataclasses.replace(params, think_budget=(budget, p.start_id, p.end_id,
                                                           int(reasoning.reopens)))
    return dataclasses.replace(req, reasoning=reasoning, params=params)


def _parts(reasoning: str, content: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in (("reasoning", reasoning), ("content", content)) if v]
