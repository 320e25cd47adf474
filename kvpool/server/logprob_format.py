"""TokenLogprob lists -> the three JSON shapes clients read.

- completions (OpenAI legacy): ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``,
  ``top_logprobs[i]`` a ``{token text: logprob}`` object holding the k most likely tokens and
  the chosen one (vLLM's shape; the first echoed prompt token has ``null`` in both lists);
  ``text_offset[i]`` is where token i's text starts in the choice's text;
- chat: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [{...}]}]}``;
- vLLM's ``prompt_logprobs``: per prompt token ``null`` (the first) or
  ``{"<token id>": {"logprob", "rank", "decoded_token"}}`` for the chosen and the top k.

A token's text (its name) is vLLM 0.33's (NOTE(logprob-names)): ``tokenizer.decode([id])``
with special tokens kept (``<s>`` reads ``<s>``), a SentencePiece piece's leading spaces kept;
a token that ends inside a UTF-8 character reads "" until the token that completes the
character, which reads the whole character. Single-id decodes are cached (bounded).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from typing import Any

from kvpool.runtime.model import TokenLogprob

__all__ = ["CONTEXT", "JoinedList", "LogprobFormatter", "joined_logprobs"]

_CACHE_MAX = 65536
_REPLACEMENT = "\ufffd"
CONTEXT = 4  # sampled ids a name may read back: enough for any UTF-8 character (vLLM's)


class JoinedList(list):
    """``head``'s items, then more: a list whose ``head`` other lists share, so that its JSON
    is made once for them all (first_events.py NOTE(echo-events)); ``json.dumps`` writes it
    as the list it is."""

    __slots__ = ("head",)

    def __init__(self, head: list, tail: list) -> None:
        super().__init__(head)
        self.extend(tail)
        self.head = head


def joined_logprobs(first: dict[str, list] | None,
                    then: dict[str, list] | None) -> dict[str, list] | None:
    """Two completions ``logprobs`` objects of consecutive tokens as one (either may be None),
    each list ``first``'s as its head (JoinedList)."""
    if first is None or then is None:
        return then if first is None else first
    return {k: JoinedList(first[k], then[k]) for k in first}


class LogprobFormatter:
    """Renders logprobs with one tokenizer's token texts.

    NOTE(untracked-entries): a chat entry's ``bytes`` are a tuple, not a list. A big answer's
    entries live until it is sent (8 answers of ~33 MB: ~7.5M containers), and every full
    (generation 2) collection walked them all with the GIL held: 1.5-2 s stalls of the loop
    and /health (an outside probe, 8 concurrent). CPython's collector stops tracking a tuple
    of ints, and then (in a full collection) a dict holding only untracked values, so the 21
    ``bytes`` and 20 alternatives of an entry (top_logprobs 20) leave its lists: 2 tracked
    containers a token (the entry and its ``top_logprobs`` list) instead of 43. ``json.dumps``
    writes a tuple as a list: the answer's bytes are the same.

    NOTE(name-once): with ``echo`` and ``logprobs`` the prompt's tokens are shown twice, in
    ``prompt_logprobs`` and in the echo's ``logprobs``, under the same names (the same ids after
    the same context: a position without an entry reads no context in either): ``echoed`` names
    them once for both. Naming them per shape doubled the split-character re-decodes, which
    are not cached (an outside probe: 30k positions, seconds of event loop).

    NOTE(logprob-names): vLLM 0.33's names (v1/engine/logprobs.py ``_verify_tokens``): a name
    that ends in U+FFFD (a byte of a character split across tokens) is decoded again after
    the last 1..4 chosen ids of the same run (generated ids for generated tokens, prompt ids
    from position 1 for prompt tokens), and the first that completes the character gives the
    name: the text past the context's own (its trailing partial bytes count for this token);
    none completes it: "". The top alternatives read the chosen tokens' context. So
    ``text_offset`` follows the text and chat ``bytes`` are the character's. A token with no
    logprob entry (the first prompt token) keeps its plain decode, as in vLLM.
    """

    def __init__(self, tokenizer: Any, *, as_token_ids: bool = False) -> None:
        """``as_token_ids``: vLLM's return_tokens_as_token_ids, each token ``token_id:<id>``."""
        self.tokenizer = tokenizer
        self.as_token_ids = as_token_ids
        self._text: dict[int, str] = {}
        self._marker: str | None | bool = False  # False: not read yet (_space_marker)

    def _plain(self, token_id: int) -> str:
        t = self._text.get(token_id)
        if t is None:
            t = self.tokenizer.decode([token_id], skip_special_tokens=False)
            if len(self._text) >= _CACHE_MAX:
                self._text.clear()
            self._text[token_id] = t
        return t

    def _space_marker(self) -> str | None:
        """The Metaspace replacement character when the tokenizer pre-tokenizes with one: its
        decoder strips a piece's leading marker, which vLLM's names put back as a space."""
        if self._marker is False:
            self._marker = None
            pre = getattr(getattr(self.tokenizer, "backend", None), "pre_tokenizer", None)
            conf = json.loads(pre.__getstate__()) if pre is not None else {}
            for one in [conf, *conf.get("pretokenizers", ())]:
                if one.get("type") == "Metaspace":
                    self._marker = one.get("replacement", "\u2581")
                    break
        return self._marker

    def _name(self, token_id: int, context: Sequence[int]) -> str:
        """The token's text after the chosen ids ``context`` (NOTE(logprob-names))."""
        t = self._plain(token_id)
        if t.endswith(_REPLACEMENT):
            return self._completed(token_id, context)
        marker = self._space_marker()
        if marker is not None:
            piece = self.tokenizer.id_to_token(token_id) or ""
            missing = (len(piece) - len(piece.lstrip(marker))) - (len(t) - len(t.lstrip(" ")))
            t = " " * missing + t if missing > 0 else t
        return t

    def _completed(self, token_id: int, context: Sequence[int]) -> str:
        decode = self.tokenizer.decode
        context = list(context)[-CONTEXT:]
        for n in range(1, len(context) + 1):
            ctx = context[-n:]
            full = decode(ctx + [token_id], skip_special_tokens=False)
            if full.endswith(_REPLACEMENT):
                continue
            clean = len(ctx)  # the context's trailing partial bytes belong to this token
            while clean > 0 and self._plain(ctx[clean - 1]).endswith(_REPLACEMENT):
                clean -= 1
            head = decode(ctx[:clean], skip_special_tokens=False) if clean else ""
            same = 0
            for a, b in zip(head, full):
                if a != b:
                    break
                same += 1
            return full[same:]
        return ""

    def _names(self, ids: Sequence[int], lps: Sequence[TokenLogprob | None],
               context: Sequence[int] = ()) -> list[tuple[str, dict[int, str]]]:
        """Per position: the chosen token's name and its alternatives' names by id;
        ``context``: the ids chosen right before ``ids[0]`` (the choice's earlier chunks)."""
        recent: deque[int | None] = deque(context, maxlen=CONTEXT)
        out = []
        for tid, lp in zip(ids, lps):
            if lp is None:
                out.append((self._plain(tid), {}))
            else:
                ctx = [t for t in recent if t is not None]
                out.append((self._name(tid, ctx), {i: self._name(i, ctx) for i, _ in lp.top}))
            recent.append(None if lp is None else tid)
        return out

    def _shown(self, token_id: int, name: str) -> str:
        return f"token_id:{token_id}" if self.as_token_ids else name

    def completion(self, ids: Sequence[int], lps: Sequence[TokenLogprob | None],
                   offset: int, context: Sequence[int] = ()) -> tuple[dict[str, list], int]:
        """One completions ``logprobs`` object for ``ids`` (after ``context``, as
        ``_names``) and the offset after them."""
        return self._completion(ids, lps, self._names(ids, lps, context), offset)

    def echoed(self, ids: Sequence[int], lps: Sequence[TokenLogprob | None]
               ) -> tuple[list[dict[str, Any] | None], dict[str, list], int]:
        """An echoed prompt's logprobs both ways, each token named once (NOTE(name-once)):
        vLLM's ``prompt_logprobs`` list, the echo's completions object from offset 0 and the
        offset after it. ``ids``: the prompt's; ``lps``: its prompt logprobs (the first None)."""
        named = self._names(ids, lps)
        echo, end = self._completion(ids, lps, named, 0)
        return self._prompt(lps, named), echo, end

    def _completion(self, ids: Sequence[int], lps: Sequence[TokenLogprob | None],
                    named: list[tuple[str, dict[int, str]]], offset: int
                    ) -> tuple[dict[str, list], int]:
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                "text_offset": []}
        for tid, lp, (name, tops) in zip(ids, lps, named):
            t = self._shown(tid, name)
            out["tokens"].append(t)
            out["text_offset"].append(offset)
            offset += len(t)
            if lp is None:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                continue
            out["token_logprobs"].append(lp.logprob)
            top = {self._shown(i, tops[i]): v for i, v in lp.top}
            top.setdefault(t, lp.logprob)
            out["top_logprobs"].append(top)
        return out, offset

    def chat(self, lps: Sequence[TokenLogprob], context: Sequence[int] = ()
             ) -> list[dict[str, Any]]:
        """The ``content`` entries of a chat choice's ``logprobs``; the chosen token's
        ``bytes`` are its name's also under as_token_ids (vLLM's); every ``bytes`` a tuple
        (NOTE(untracked-entries))."""
        ids = [lp.token_id for lp in lps]
        out = []
        for lp, (name, tops) in zip(lps, self._names(ids, lps, context)):
            top = [self._entry(self._shown(i, tops[i]), v) for i, v in lp.top]
            out.append(dict(self._entry(self._shown(lp.token_id, name), lp.logprob),
                            bytes=tuple(name.encode("utf-8")), top_logprobs=top))
        return out

    @staticmethod
    def _entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": tuple(token.encode("utf-8"))}

    def prompt(self, lps: Sequence[TokenLogprob | None]) -> list[dict[str, Any] | None]:
        """vLLM's ``prompt_logprobs`` list."""
        ids = [0 if lp is None else lp.token_id for lp in lps]
        return self._prompt(lps, self._names(ids, lps))

    def _prompt(self, lps: Sequence[TokenLogprob | None],
                named: list[tuple[str, dict[int, str]]]) -> list[dict[str, Any] | None]:
        out: list[dict[str, Any] | None] = []
        for lp, (name, tops) in zip(lps, named):
            if lp is None:
                out.append(None)
                continue
            d = {str(i): {"logprob": v, "rank": r + 1, "decoded_token": self._shown(i, tops[i])}
                 for r, (i, v) in enumerate(lp.top)}
            d.setdefault(str(lp.token_id), {"logprob": lp.logprob, "rank": lp.rank,
                                             "decoded_token": self._shown(lp.token_id, name)})
            out.append(d)
        return out
