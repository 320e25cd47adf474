"""vLLM's ``POST /tokenize`` and ``POST /detokenize`` (routers and clients count tokens with them).

::

    /tokenize   {model?, prompt, add_special_tokens?=true}          -> {count, max_model_len,
                {model?, messages, add_generation_prompt?, ...}        tokens}
    /detokenize {model?, tokens}                                    -> {prompt}

``messages`` are rendered exactly as /v1/chat/completions renders them, so ``count`` equals that
request's ``usage.prompt_tokens``. Bad input: 400 naming the field; an unknown model: 404.
Bodies are bounded by the app's ``client_max_size`` like every other route.
"""

from __future__ import annotations

from aiohttp import web

from kvpool.server.protocol import RequestParser

__all__ = ["TokenizeRoutes"]


class TokenizeRoutes:
    def __init__(self, parser: RequestParser) -> None:
        self.parser = parser

    def register(self, app: web.Application) -> None:
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)

    async def tokenize(self, request: web.Request) -> web.Response:
        p = self.parser
        ids = p.parse_tokenize(p.decode_body(await request.read()))
        return web.json_response({"count": len(ids), "max_model_len": p.max_model_len,
                                  "tokens": ids})

    async def detokenize(self, request: web.Request) -> web.Response:
        p = self.parser
        text = p.parse_detokenize(p.decode_body(await request.read()))
        return web.json_response({"prompt": text})
