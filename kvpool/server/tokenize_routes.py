"""vLLM's ``POST /tokenize`` and ``POST /detokenize`` (routers and clients count tokens with them).

::

    /tokenize   {model?, prompt, add_special_tokens?=true}          -> {count, max_model_len,
                {model?, messages, add_generation_prompt?, ...}        tokens, token_strs?}
                return_token_strs?=false
    /detokenize {model?, tokens}                                    -> {prompt}

``messages`` are rendered exactly as /v1/chat/completions renders them (``reasoning_effort``
and the server's --default-chat-template-kwargs under the request's chat_template_kwargs too,
as vLLM's /tokenize renders them), so ``count`` equals that request's ``usage.prompt_tokens``.
A field either route does not know is ignored unread and listed in ``X-Kvpool-Ignored-Fields``,
as on the generation routes (body_fields.py; ``--reject-unknown-fields``: 400). Bad input: 400
naming the field; an unknown model: 404.
Bodies are bounded by the app's ``client_max_size`` like every other route, and a large one is
parsed and tokenized on the generation routes' ParsePool, off the event loop (json_body.py).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from kvpool.server.body_fields import KNOWN_DETOKENIZE, KNOWN_TOKENIZE, ignored_header
from kvpool.server.json_body import ParsePool, json_bool
from kvpool.server.protocol import RequestParser

__all__ = ["TokenizeRoutes"]


class TokenizeRoutes:
    def __init__(self, parser: RequestParser, parse_pool: ParsePool) -> None:
        self.parser = parser
        self.parse_pool = parse_pool

    def register(self, app: web.Application) -> None:
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)

    def _tokenize(self, raw: bytes) -> tuple[dict[str, Any], dict[str, str]]:
        p = self.parser
        body = p.decode_body(raw)
        ignored = p.fields.check(body, KNOWN_TOKENIZE)  # a 400 first, if they are refused
        ids = p.parse_tokenize(body)
        out = {"count": len(ids), "max_model_len": p.max_model_len, "tokens": ids}
        if json_bool(body.get("return_token_strs")):  # vLLM's: each id's token (NOTE(lax-bool))
            out["token_strs"] = [p.tokenizer.id_to_token(t) for t in ids]
        return out, ignored_header(ignored)

    def _detokenize(self, raw: bytes) -> tuple[dict[str, Any], dict[str, str]]:
        body = self.parser.decode_body(raw)
        ignored = self.parser.fields.check(body, KNOWN_DETOKENIZE)
        return {"prompt": self.parser.parse_detokenize(body)}, ignored_header(ignored)

    async def tokenize(self, request: web.Request) -> web.Response:
        out, headers = await self.parse_pool.read_and_parse(request, self._tokenize)
        return web.json_response(out, headers=headers)

    async def detokenize(self, request: web.Request) -> web.Response:
        out, headers = await self.parse_pool.read_and_parse(request, self._detokenize)
        return web.json_response(out, headers=headers)
