"""Completions ``best_of``, read so that no request vLLM 0.33 takes is refused.

vLLM 0.33's CompletionRequest has no ``best_of`` field: vLLM ignores it whatever its value
(an unknown field) and runs ``n`` sequences. kvpool keeps OpenAI's meaning where it can act on
it (vLLM v0's rule: each prompt runs ``best_of`` sequences and returns the ``n`` of highest
cumulative logprob; responses.py ``returned``).

NOTE(best-of): ``best_of`` is acted on only when it reads as an int (NOTE(lax-int)) with
``n < best_of <= max_n`` and the request does not stream (the best ones are known only at
the end); ``max_n`` here is min(16, ``--max-n``, ``--max-num-seqs``) (protocol.py
MAX_BEST_OF), the bound it had when a request's sequences could only run together (they now
run as child requests past ``--max-num-seqs``: NOTE(apart) in request_checker.py; the bound is
kept, as nothing vLLM serves needs more). Anything else (``best_of <= n``, past that
bound, with ``stream``, not an int) runs ``n`` sequences, as vLLM 0.33 does, and ``best_of``
is listed in ``X-Kvpool-Ignored-Fields`` (none for ``best_of == n``, which asks for nothing
more); it is never a 400.
"""

from __future__ import annotations

from typing import Any

from kvpool.server.json_body import json_int

__all__ = ["read_best_of"]


def read_best_of(body: dict[str, Any], n: int, stream: bool, max_n: int,
                 ignored: tuple[str, ...], chat: bool) -> tuple[int, tuple[str, ...]]:
    """(sequences each prompt runs, ``ignored`` with ``best_of`` added where it is not acted
    on): NOTE(best-of). Chat has no such field (already among the unknown ones)."""
    value = None if chat else body.get("best_of")
    if value is None:
        return n, ignored
    best_of = json_int(value)
    if best_of is not None and n < best_of <= max_n and not stream:
        return best_of, ignored
    return n, ignored if best_of == n else (*ignored, "best_of")
