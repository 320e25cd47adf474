"""PromptKeys: a request body's prefix-hash keys, computed in the router (once per request).

The replica hashes a prompt as ``BlockHasher(block_size, model_id, algo).hash_blocks(ids,
cache_salt)`` (kvpool.core.hashing); GET /v1/kvpool/kv_events names those three and the
tokenizer, so the router computes the very hashes the replica's events carry::

    "prompt": [ids] / "prompt_token_ids"   the ids as sent (no tokenizer needed)
    "prompt": "text" / "messages"          the replica's RequestParser rebuilt here: its
                                           tokenizer (the model directory it reports, or the
                                           built-in model's) and chat template
    "cache_salt"                           the chain's root salt, as the replica uses it;
                                           with ``tenant_namespaced`` the tenant folded in by
                                           the replicas' own rule (cache_namespace.py), the
                                           tenant from the forwarded headers by theirs
                                           (tenant.py: ``tenant_header``, else the API key)

NOTE(agreement): the text and chat paths use the replica's own parser class, tokenizer files
and template, so the router's ids are the replica's. Where the router cannot build that
(the model directory is not readable here, a body its parser refuses, a tenant header too
long), ``keys`` answers None and the router asks the replicas' lookups for that request.
A body with logprob fields takes the parser's path too: a request asking for prompt logprobs
reads no cache on the replica, so it gets no keys (no hit anywhere), as its lookup says.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from multidict import CIMultiDict

from kvpool.core.hashing import BlockHasher
from kvpool.server.cache_namespace import CacheNamespace
from kvpool.server.logprob_fields import LOGPROB_FIELDS
from kvpool.server.middleware import APIError
from kvpool.server.template_sandbox import TemplateRefused
from kvpool.server.tenant import tenant_of_headers

__all__ = ["PromptKeys", "info_problem"]

log = logging.getLogger("kvpool.router")
_GENEROUS = 1 << 30  # the parser's request limits: the replica enforces its own
_PER_TENANT = CacheNamespace(identity=True)  # the rule of a tenant-namespaced replica
_INT_ONLY = {int}


def _is_ids(p: Any) -> bool:
    # the element types gathered in C (a per-id generator cost as much as the hashing);
    # ``type(t) is int`` keeps bools out, as the replica's parser does
    return isinstance(p, list) and bool(p) and set(map(type, p)) == _INT_ONLY


_MAX_BLOCK_SIZE = 1 << 16
_OPTIONAL_TEXT = ("replay_endpoint", "topic", "tenant_header", "tokenizer", "chat_template",
                  "instance")


def _text(value: Any, optional: bool = False) -> bool:
    return isinstance(value, str) or (optional and value is None)


def info_problem(info: dict[str, Any]) -> str | None:
    """Why a replica's kv_events info cannot be followed or hashed by, None when it can. A
    replica's word is checked like a client's: an endpoint that is not tcp://, a block size
    of 0 or a hash spec that names no algorithm made the router fail (ZMQError at startup,
    ZeroDivisionError on every token-id request)."""
    if not _text(info.get("endpoint")) or not info["endpoint"].startswith("tcp://"):
        return "endpoint: want tcp://HOST:PORT"
    if not all(_text(info.get(k), True) for k in _OPTIONAL_TEXT):
        return f"{', '.join(_OPTIONAL_TEXT)}: want strings or null"
    bs, h = info.get("block_size"), info.get("hash")
    if type(bs) is not int or not 1 <= bs <= _MAX_BLOCK_SIZE:
        return f"block_size: want an integer in 1..{_MAX_BLOCK_SIZE}"
    mml = info.get("max_model_len")
    if mml is not None and (type(mml) is not int or mml < 1):
        return "max_model_len: want a positive integer"
    if not isinstance(h, dict) or not _text(h.get("model_id")) or not _text(h.get("algo")):
        return "hash: want {\"model_id\": str, \"algo\": str}"
    try:
        BlockHasher(bs, h["model_id"], h["algo"])
    except ValueError as exc:  # an unknown algorithm (ConfigError)
        return f"hash: {exc}"
    return None


class PromptKeys:
    """Hashes of a body's prompt under one replica hash spec (from its kv_events info)."""

    def __init__(self, info: dict[str, Any]) -> None:
        h = info["hash"]
        self.block_size = int(info["block_size"])
        self.hasher = BlockHasher(self.block_size, h["model_id"], h["algo"])
        self.namespaced = bool(info.get("tenant_namespaced"))
        self.tenant_header: str | None = info.get("tenant_header")
        self.parser: Any = None  # built by load_parser (slow: the tokenizer and torch import)
        self.wants_parser = False  # a text or chat prompt came while there was no parser
        # kv_routing.py NOTE(lazy-tokenizer): a load started (until RELOAD_AFTER after it
        # failed), and NOTE(load-fails): its failure said; kept here, so a spec the fleet no
        # longer has takes its state with it
        self.loading = False
        self.failure_said = False
        # kv_render.py NOTE(render-budget): a render of this spec's template ran past its
        # budget; its chats are scored without its keys from then on
        self.overran = False
        self.refusal_said = False  # and one stopped by the sandbox (TemplateRefused) was said
        self.info = info

    def renders(self, body: Any) -> bool:
        """Whether ``keys(body)`` runs the replicas' chat template (kv_render.py
        NOTE(render-budget)): a chat body, once the parser is loaded."""
        return self.parser is not None and isinstance(body, dict) and "messages" in body

    def load_parser(self) -> None:
        """The replica's RequestParser, rebuilt here for text and chat prompts (blocking:
        call it off the event loop). A directory not readable here leaves it None, logged."""
        from kvpool.runtime.model import build_byte_tokenizer, load_tokenizer
        from kvpool.server.chat_template import load_chat_template
        from kvpool.server.protocol import RequestParser

        tok_dir = self.info.get("tokenizer")
        if tok_dir is not None and not Path(tok_dir).is_dir():
            log.warning("router: the replicas' tokenizer %s is not readable here: text and chat "
                        "prompts are placed by lookups (run the router where it can read it)",
                        tok_dir)
            return
        tokenizer = build_byte_tokenizer() if tok_dir is None else load_tokenizer(tok_dir)
        self.parser = RequestParser(
            tokenizer, self.info.get("model_names") or (), int(self.info["max_model_len"]),
            max_n=_GENEROUS, max_tokens_limit=_GENEROUS, max_stop=_GENEROUS,
            chat_template=load_chat_template(tok_dir, self.info.get("chat_template")))

    def ids_and_salt(self, body: dict | None) -> tuple[list[int], str | None] | None:
        """The prompt's token ids and cache salt of a decoded request body, or None when only
        a lookup can tell (``body`` None: too large for the router to decode)."""
        if not isinstance(body, dict):
            return None
        salt = body.get("cache_salt")
        salt = salt if isinstance(salt, str) else None
        p = body.get("prompt_token_ids", body.get("prompt"))
        if "messages" not in body and _is_ids(p) and LOGPROB_FIELDS.isdisjoint(body):
            return p, salt
        if self.parser is None:
            self.wants_parser = True
            return None
        try:
            req = (self.parser.parse_chat(body) if "messages" in body
                   else self.parser.parse_completion(body))
        except TemplateRefused:  # the template's fault: kv_render.py says it, once
            raise
        except Exception as exc:  # noqa: BLE001 - the replica will refuse it with the right error
            if isinstance(exc.__context__ or exc, MemoryError):  # the template's fault too,
                raise MemoryError(str(exc)) from exc  # at NOTE(render-process)'s limit
            return None
        if req.params.prompt_logprobs is not None:  # it reads no cache: no hit on any replica
            return [], req.cache_salt  # (NOTE(prompt-logprobs) in kvpool/runtime/engine)
        return req.prompt_ids, req.cache_salt

    def keys(self, body: dict | None, headers: Sequence[tuple[str, str]] = ()
             ) -> tuple[list[bytes], int] | None:
        """(full-block hashes, hit cap in blocks), or None: ask the lookups (module doc).
        ``body``: the decoded request (relayed.BodyReader, NOTE(once)); ``headers``: the
        request's, as forwarded to the replica (its tenant identity)."""
        got = self.ids_and_salt(body)
        if got is None:
            return None
        ids, salt = got
        if self.namespaced:
            try:
                tenant = tenant_of_headers(CIMultiDict(headers), self.tenant_header, keyed=True)
            except APIError:  # a tenant header too long or repeated: the replica answers 400
                return None
            salt = _PER_TENANT.salt(tenant, salt)
        limit = max(0, (len(ids) - 1) // self.block_size)  # admission's cap, as the lookup's
        try:
            return self.hasher.hash_blocks(ids[:limit * self.block_size], salt), limit
        except (ValueError, TypeError):
            return None  # ids out of range: the replica refuses the request itself
