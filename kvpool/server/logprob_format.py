"""TokenLogprob lists -> the three JSON shapes clients read.

- completions (OpenAI legacy): ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``,
  ``top_logprobs[i]`` a ``{token text: logprob}`` object holding the k most likely tokens and
  the chosen one (vLLM's shape; the first echoed prompt token has ``null`` in both lists);
  ``text_offset[i]`` is where token i's text starts in the choice's text;
- chat: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [{...}]}]}``;
- vLLM's ``prompt_logprobs``: per prompt token ``null`` (the first) or
  ``{"<token id>": {"logprob", "rank", "decoded_token"}}`` for the chosen and the top k.

A token's text is ``tokenizer.decode([id])`` with special tokens kept, as vLLM decodes it (a
lone byte of a multi-byte character reads U+FFFD, as in vLLM; ``<s>`` reads ``<s>``, where it
read "" and every special token collapsed onto one top_logprobs key); decoded once per id and
kept in a bounded cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvpool.runtime.model import TokenLogprob

__all__ = ["LogprobFormatter", "joined_logprobs"]

_CACHE_MAX = 65536


def joined_logprobs(first: dict[str, list] | None,
                    then: dict[str, list] | None) -> dict[str, list] | None:
    """Two completions ``logprobs`` objects of consecutive tokens as one (either may be None)."""
    if first is None or then is None:
        return then if first is None else first
    return {k: first[k] + then[k] for k in first}


class LogprobFormatter:
    """Renders logprobs with one tokenizer's token texts."""

    def __init__(self, tokenizer: Any, *, as_token_ids: bool = False) -> None:
        """``as_token_ids``: vLLM's return_tokens_as_token_ids, each token ``token_id:<id>``."""
        self.tokenizer = tokenizer
        self.as_token_ids = as_token_ids
        self._text: dict[int, str] = {}

    def text(self, token_id: int) -> str:
        if self.as_token_ids:
            return f"token_id:{token_id}"
        t = self._text.get(token_id)
        if t is None:
            t = self.tokenizer.decode([token_id], skip_special_tokens=False)
            if len(self._text) >= _CACHE_MAX:
                self._text.clear()
            self._text[token_id] = t
        return t

    def completion(self, ids: Sequence[int], lps: Sequence[TokenLogprob | None],
                   offset: int) -> tuple[dict[str, list], int]:
        """One completions ``logprobs`` object for ``ids`` and the offset after them."""
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                "text_offset": []}
        for tid, lp in zip(ids, lps):
            t = self.text(tid)
            out["tokens"].append(t)
            out["text_offset"].append(offset)
            offset += len(t)
            if lp is None:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                continue
            out["token_logprobs"].append(lp.logprob)
            top = {self.text(i): v for i, v in lp.top}
            top.setdefault(t, lp.logprob)
            out["top_logprobs"].append(top)
        return out, offset

    def chat(self, lps: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
        """The ``content`` entries of a chat choice's ``logprobs``."""
        return [dict(self._entry(lp.token_id, lp.logprob),
                     top_logprobs=[self._entry(i, v) for i, v in lp.top]) for lp in lps]

    def _entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        t = self.text(token_id)
        return {"token": t, "logprob": logprob, "bytes": list(t.encode("utf-8"))}

    def prompt(self, lps: Sequence[TokenLogprob | None]) -> list[dict[str, Any] | None]:
        """vLLM's ``prompt_logprobs`` list."""
        out: list[dict[str, Any] | None] = []
        for lp in lps:
            if lp is None:
                out.append(None)
                continue
            d = {str(i): {"logprob": v, "rank": r + 1, "decoded_token": self.text(i)}
                 for r, (i, v) in enumerate(lp.top)}
            d.setdefault(str(lp.token_id), {"logprob": lp.logprob, "rank": lp.rank,
                                             "decoded_token": self.text(lp.token_id)})
            out.append(d)
        return out
