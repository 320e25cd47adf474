"""RequestParsers over the real built-in byte tokenizer with small limits: ``parser(...)`` for a
test's own limits, ``P`` (the defaults here) for the request tests that share one."""

from __future__ import annotations

from kvpool.runtime.model import build_byte_tokenizer
from kvpool.server.protocol import RequestParser

TOK = build_byte_tokenizer()
MODEL = "kvpool-tiny"


def parser(max_model_len: int = 64, **kw) -> RequestParser:
    args = dict(max_n=4, max_tokens_limit=100, max_stop=3)
    args.update(kw)
    return RequestParser(TOK, [MODEL, "alias"], max_model_len, **args)


P = parser()
