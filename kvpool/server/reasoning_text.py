"""``--reasoning-parser granite``: a thinking that text markers, not tags, set apart.

IBM Granite 3.2+, told ``thinking`` (chat_template_kwargs), writes its thinking after
"Here is my thought process:" and its answer after "Here is my response:" ("Here's" in
either, as vLLM 0.33's ``granite`` parser also reads)::

    Here is my thought process: 2 + 2 = 4. Here is my response: It is 4.
      ->  reasoning " 2 + 2 = 4. "   content " It is 4."

Each marker is several tokens of the vocabulary, so reasoning.py's tag families (one token a
tag) do not fit; this module reads the markers in the text (NOTE(granite-markers)):

- a thinking opens only where the output starts with a start marker, whatever the template
  was told; an output that does not is all content, markers and all;
- the first response marker after it ends the thinking; the rest is the answer, as it is
  (a later marker is text); an output that never writes one is all reasoning (content null);
- a stream holds a tail that may be the start of a marker (tools/stream.py
  ``partial_marker``) and lets it go, as text, once it is not one or the output ends;
- usage counts the tokens wholly inside the thinking: after the token that completes the
  start marker, before the first token that has any of the response marker
  (:class:`MarkerCount`);
- a grammar (NOTE(think-grammar)) and ``thinking_token_budget`` (NOTE(think-budget)) need the
  one token that ends the thinking; there is none, so a request that asks for either while
  the model thinks is a 400 (reasoning.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvpool.server.tools.stream import partial_marker

__all__ = ["MarkerCount", "MarkerStream", "Markers", "TEXT_PARSERS"]


@dataclass(frozen=True, slots=True)
class Markers:
    """A text-marker parser: the spellings of its start and response markers."""

    starts: tuple[str, ...]
    ends: tuple[str, ...]
    reopens = False  # the answer never opens a thinking again
    may_open = True  # a thinking opens where the text starts with a marker, told or not

    @staticmethod
    def opens(kw: dict[str, Any]) -> bool:
        """Whether the template told the model to think (Granite's kwarg ``thinking``): then
        its output opens with the start marker, and nothing can wait for the thinking's end."""
        return bool(kw.get("thinking"))

    def stream(self, inside: bool) -> MarkerStream:
        return MarkerStream(self)

    def counter(self, inside: bool, tokenizer: Any) -> MarkerCount:
        """A choice's first state for ``ReasoningRequest.count``: its own text reader."""
        return MarkerCount(self, tokenizer)


# NOTE(granite-markers) (docs/architecture.md "Reasoning output"): vLLM 0.33's granite parser
# reads a stream this way, but its whole-output reading differs in two cases: it finds the
# start marker anywhere (dropping what came before it), and without a response marker it gives
# the whole text as content. kvpool reads a whole output as its stream joins, as for every
# parser. vLLM counts no reasoning tokens under granite, and its grammar never starts there
# (no end token is ever seen): kvpool counts them, and refuses the grammar while thinking.
# An empty thinking (the start marker, then at once the response marker) is reasoning "" in
# the whole answer and no reasoning delta in the stream, as in vLLM: its whole reading keeps
# the empty group, and it sends no delta with neither reasoning nor content. Its stream there
# sends marker text as reasoning or content, as the text happens to be cut; kvpool's does not.
TEXT_PARSERS = {"granite": Markers(("Here is my thought process:", "Here's my thought process:"),
                                   ("Here is my response:", "Here's my response:"))}


def _first(text: str, markers: tuple[str, ...]) -> tuple[int, str]:
    """(where, which) of the first of ``markers`` in ``text``; (-1, "") where none is."""
    found = [(i, m) for m in markers if (i := text.find(m)) >= 0]
    return min(found) if found else (-1, "")


class MarkerStream:
    """One streamed choice's text -> ("reasoning" | "content", piece) parts, as
    reasoning.ThinkStream; ``phase``: "lead" while the text may still be a start marker,
    then "think" or "answer"."""

    def __init__(self, markers: Markers) -> None:
        self.markers = markers
        self.phase = "lead"
        self.opened = False  # whether a thinking opened
        self.held = ""

    def feed(self, piece: str) -> list[tuple[str, str]]:
        text, self.held = self.held + piece, ""
        if self.phase == "lead":
            text = self._lead(text)
            if self.phase == "lead":
                return []
        if self.phase == "answer":
            return [("content", text)] if text else []
        at, marker = _first(text, self.markers.ends)
        if at >= 0:
            self.phase = "answer"
            return _parts(text[:at], text[at + len(marker):])
        keep = partial_marker(text, self.markers.ends)
        self.held = text[len(text) - keep:] if keep else ""
        return _parts(text[:len(text) - keep], "")

    def _lead(self, text: str) -> str:
        """The output's first text: after a whole start marker the thinking opens; a prefix
        of one is held; anything else makes it all answer. Returns the text still to read."""
        for m in self.markers.starts:
            if text.startswith(m):
                self.phase, self.opened = "think", True
                return text[len(m):]
        if any(m.startswith(text) for m in self.markers.starts):
            self.held = text
        else:
            self.phase = "answer"
        return text

    def finish(self) -> list[tuple[str, str]]:
        """The end of the output: a held tail that never became a marker is read as it is."""
        held, self.held = self.held, ""
        return _parts(held, "") if self.phase == "think" else _parts("", held)


def _parts(reasoning: str, content: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in (("reasoning", reasoning), ("content", content)) if v]


class MarkerCount:
    """One choice's reasoning tokens under text markers: each token's text (an incremental
    detokenizer, as the output's text is made) read against the markers. ``count`` returns
    the state to keep: this object while the thinking may go on, False once it cannot."""

    def __init__(self, markers: Markers, tokenizer: Any) -> None:
        self.markers = markers
        self.detok = tokenizer.detokenizer()
        self.text = ""  # the output's text while it may be a start marker; then its tail
        self.start = -1  # where the thinking's text starts (-1: not opened yet)
        self.pos = 0  # characters read
        self.recent: list[tuple[int, int]] = []  # counted tokens' spans a marker may overlap
        self.longest = max(len(m) for m in markers.ends)

    def count(self, ids: Any) -> tuple[int, MarkerCount | bool]:
        n = 0
        for t in ids:
            piece = self.detok.push(t)
            a, self.pos = self.pos, self.pos + len(piece)
            self.text += piece
            if self.start < 0:
                if not self._opens():
                    return n, False
                continue
            n += 1
            self.recent = [s for s in self.recent if s[1] > a - self.longest] + [(a, self.pos)]
            ended = self._ends()
            if ended is not None:
                return n - sum(b > ended for _, b in self.recent), False
            self.text = self.text[-self.longest:]
        return n, self

    def _opens(self) -> bool:
        """Whether the output may still open a thinking; ``start`` set where one did."""
        for m in self.markers.starts:
            if self.text.startswith(m):
                self.start, self.text = len(m), self.text[len(m):]
                return self._ends() is None  # closed at once: nothing to count
        return any(m.startswith(self.text) for m in self.markers.starts)

    def _ends(self) -> int | None:
        """Where the response marker starts, if ``text`` (the thinking's tail) has one."""
        at, _ = _first(self.text, self.markers.ends)
        return None if at < 0 else self.pos - len(self.text) + at
