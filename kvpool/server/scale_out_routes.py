"""vLLM 0.33's scale-out routes, answered as ``vllm serve`` answers them without
``--enable-scale-out``: each ``POST`` is a 403 with the error JSON, whatever its body
(docs/architecture.md "vLLM's scale-out routes")::

    POST /v1/chat/completions/render    /v1/chat/completions/derender
    POST /v1/completions/render         /v1/completions/derender
    POST /v1/messages/render            /inference/v1/generate
    POST /v1/responses/render           /inference/v1/abort_requests

NOTE(scale-out): vLLM registers these paths on every generating server and, without its flag,
answers each with 403 ``Scale-out endpoints are disabled`` (vllm/entrypoints/scale_out/
factories.py); kvpool used to answer 404, which a client reads as "not vLLM" or "wrong URL"
rather than "not enabled here". kvpool does not implement them, so it takes no flag that turns
them on: ``--enable-scale-out`` and ``--tokens-only`` are refused at start
(vllm_flags_refused.py), and the 403 says both things.

vLLM's body is its ErrorResponse, ``{"error": {"message", "type": "PermissionDeniedError",
"param": null, "code": 403}}``, on all eight paths, ``/v1/messages/render`` too (the handler
returns it as it is, with no Anthropic translation). kvpool's body has the same keys; its
``type`` and ``code`` follow the one rule every kvpool error follows (middleware.py
``error_type``: the type from the status, the code a string), not vLLM's values: vLLM names a
type at each raise site (an exception's class name, or the HTTP phrase for a routing error),
with no rule from the status to copy, and this one error in vLLM's values would be the only
kvpool error a client could not read by kvpool's rule. On ``/v1/messages/render`` the body is
this one too, not Anthropic's (anthropic_errors.py NOTE(render-errors)).
"""

from __future__ import annotations

from aiohttp import web

from kvpool.server.middleware import APIError

__all__ = ["SCALE_OUT_PATHS", "register_scale_out_refusals"]

# vLLM's render, derender and token-in-token-out routers, in that order; all POST only
SCALE_OUT_PATHS = ("/v1/chat/completions/render", "/v1/messages/render",
                   "/v1/completions/render", "/v1/responses/render",
                   "/v1/chat/completions/derender", "/v1/completions/derender",
                   "/inference/v1/generate", "/inference/v1/abort_requests")


async def _refuse(request: web.Request) -> web.Response:
    """The 403 (NOTE(scale-out)); the body is never read, as vLLM's disabled route reads none."""
    raise APIError(403, "Scale-out endpoints are disabled: vLLM serves POST "
                        f"{request.path} only with --enable-scale-out, and kvpool does not "
                        "implement the scale-out endpoints (render, derender, "
                        "/inference/v1/generate); send the request to /v1/completions or "
                        "/v1/chat/completions (POST /tokenize gives a prompt's tokens)",
                   code="scale_out_disabled")


def register_scale_out_refusals(app: web.Application) -> None:
    for path in SCALE_OUT_PATHS:
        app.router.add_post(path, _refuse)
