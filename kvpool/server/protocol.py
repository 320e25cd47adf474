"""OpenAI request bodies -> one validated :class:`ParsedRequest` (prompt ids + SamplingParams).

Policy, in one place:

- The body: json_body.py (UTF-8 JSON object, bounded depth and value count); chat
  ``messages``: chat_messages.py; the built-in chat template: builtin_template.py.
- Unknown fields are **ignored** as vLLM ignores them (logged once per name, listed in the
  ``X-Kvpool-Ignored-Fields`` response header), or with ``reject_unknown_fields`` rejected
  (400, code ``unknown_parameter``) as OpenAI's own API does: body_fields.py. Known OpenAI
  features this server does not implement are **rejected** with 400 naming the field when
  set to anything but their default (``suffix``, ``use_beam_search``), so a client never gets
  a silently different result. ``tools`` / ``tool_choice`` / ``parallel_tool_calls``: tools/.
  Sampling controls (penalties, ``logit_bias``, ``min_tokens``, ``min_p``) and
  ``response_format``: sampling_fields.py;
  ``logprobs``, ``top_logprobs``, ``echo``, ``prompt_logprobs``: logprob_fields.py. A body
  holding none of a family's fields takes its defaults without entering its module.
- ``prompt``: a string, a list of token ids, or a list of several of either kind (at most
  ``max_prompts``; every prompt is checked before any starts: one bad prompt is a 400 for the
  whole request, naming ``prompt`` and its index).
- An unknown ``model`` is a 404 with code ``model_not_found`` (OpenAI's shape; vLLM's: README);
  an alias (``model_aliases``, NOTE(served-name)) is answered as the name it stands for.
- ``null`` means "not given" for every optional field.
- Bounds come from EngineConfig: ``n <= max_n``, ``max_tokens <= max_tokens_limit``,
  ``len(stop) <= max_stop``; ``prompt < max_model_len`` (code ``context_length_exceeded``),
  ``max_tokens`` then lowered to the room the prompt leaves, as vLLM's server lowers it
  (NOTE(clamp), context_budget.py). Whether the prompt fits the *pool* is the engine's call.
- NOTE(bounded-work): a prompt that cannot fit is refused *before* the expensive step: a
  token-id list of ``max_model_len`` ids or more before its ids are checked one by one, and a
  text (a string prompt, or the rendered chat) longer than ``max_model_len *
  tokenizer.max_chars_per_token()`` characters before it is tokenized (it needs more than
  ``max_model_len`` tokens, so this bound never refuses a prompt that would fit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from kvpool.errors import RequestError, context_length_error, shown
from kvpool.runtime.model.sampling import SamplingParams
from kvpool.sched import exceeds_context
from kvpool.server.best_of import read_best_of
from kvpool.server.body_fields import (INT32, KNOWN_CHAT, KNOWN_COMPLETION, KNOWN_TOKENIZE,
                                      UNSUPPORTED_CHAT, UNSUPPORTED_COMPLETION,
                                      check_unsupported, opt, salt_and_priority, seed_field,
                                      stop_strings, stream_options, token_ids, with_defaults)
from kvpool.server.field_policy import FieldPolicy
from kvpool.server.builtin_template import ChatTemplate
from kvpool.server.chat_messages import parse_messages
from kvpool.server.context_budget import token_budgets
from kvpool.server.forced_tool_fields import drop_for_forced_tool
from kvpool.server.generation_config import CEILING_KEY
from kvpool.server.json_body import (MAX_JSON_BYTES_PER_CHAR, MAX_JSON_DEPTH, decode_json_body,
                                     json_bool, json_int)
from kvpool.server.logprob_fields import (DEFAULT_MAX_LOGPROBS, LOGPROB_FIELDS, NO_LOGPROBS,
                                         LogprobRequest, parse_logprob_fields)
from kvpool.server.parsed_request import ModelNotFoundError, ParsedRequest, ServedNames
from kvpool.server.reasoning import read_reasoning
from kvpool.server.sampling_fields import SAMPLING_FIELDS, parse_sampling_controls, unheeded_keys
from kvpool.server.template_cache import TemplateCache
from kvpool.server.tools.request import ToolRequest, parse_tool_request, template_tools
from kvpool.server.vllm_fields import (CHAT_EXTRAS, COMPLETION_EXTRAS, VllmExtras,
                                      parse_vllm_extras)

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["ChatTemplate", "ModelNotFoundError", "ParsedRequest", "RequestParser"]

DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
MIN_STRING_BOUND = 1 << 20  # bytes: a JSON string this long is never refused unread
MAX_BEST_OF = 16  # the old --max-n default: best_of past it stays unheeded (NOTE(max-n))


def _truncate(ids: list[int], extras: VllmExtras) -> list[int]:
    """vLLM's truncate_prompt_tokens: ``keep`` ids, the last ones or with truncation_side
    "right" the first ones (vllm_fields.py)."""
    keep = extras.truncate_prompt_tokens
    if keep is None or len(ids) <= keep:
        return ids
    return ids[:keep] if extras.truncation_side == "right" else ids[-keep:]


class RequestParser:
    """Validates OpenAI completion/chat bodies against the model and EngineConfig bounds."""

    def __init__(self, tokenizer: Any, model_names: Sequence[str], max_model_len: int, *,
                 max_n: int, max_tokens_limit: int, max_stop: int, max_num_seqs: int | None = None,
                 max_json_depth: int = MAX_JSON_DEPTH, logits_size: int | None = None,
                 chat_template: Any = None, max_logprobs: int = DEFAULT_MAX_LOGPROBS,
                 max_prompts: int = 1024, reject_unknown_fields: bool = False,
                 defaults: dict[str, Any] | None = None, tool_parser: Any = None,
                 trust_request_chat_template: bool = False, reasoning_parser: Any = None,
                 model_aliases: Mapping[str, str] | None = None) -> None:
        """``chat_template``: the model's (chat_template.ModelChatTemplate) or None for the
        built-in :class:`ChatTemplate`. ``reject_unknown_fields``: 400 for a field this
        server does not know (default: ignored, as vLLM does). ``defaults``: request-field
        defaults from the model's generation_config.json (generation_config.py).
        ``tool_parser``: reads tool_choice auto (tools/parsers.py); None: auto is a 400.
        ``trust_request_chat_template``: run a request's own chat_template (template_cache.py
        NOTE(untrusted-template); default: 400). ``reasoning_parser``: reads chat output's
        thinking apart (reasoning.py), or None. ``logits_size``: the model's vocabulary
        (config vocab_size, NOTE(logits-size) in sampling_fields.py; None: the tokenizer's).
        ``model_aliases``: {name: the served name it stands for} (parsed_request.ServedNames)."""
        self.fields = FieldPolicy(reject_unknown_fields)
        self.tool_parser, self.reasoning_parser = tool_parser, reasoning_parser
        defaults = dict(defaults or {})
        self.default_max_tokens: int | None = defaults.pop("max_tokens", None)
        self.max_tokens_ceiling: int | None = defaults.pop(CEILING_KEY, None)
        self.defaults = defaults  # sampling fields a request leaves out take these
        self.tokenizer = tokenizer
        self.models = ServedNames(model_names, model_aliases)
        self.max_model_len = max_model_len
        self.max_n, self.max_stop, self.max_tokens_limit = max_n, max_stop, max_tokens_limit
        self.max_best_of = min(max_n, max_num_seqs or max_n, MAX_BEST_OF)  # NOTE(best-of)
        self.max_json_depth = max_json_depth
        # NOTE(gil): a request that fits holds at most max_model_len prompt ids (or messages,
        # each >= 1 token, a few fields each), <= 1024 logit_bias entries and max_stop stops;
        # past this many value separators the body cannot fit (json_body.py)
        self.max_body_commas = 8 * max_model_len + 4 * max_stop + 16384
        self.chat_template = chat_template or ChatTemplate()
        self.templates = TemplateCache(self.chat_template, trust_request_chat_template)
        self.max_logprobs, self.max_prompts = max_logprobs, max_prompts
        self.vocab_size = int(tokenizer.vocab_size)
        self.logits_size = self.vocab_size if logits_size is None else int(logits_size)
        self._set_string_bounds(tokenizer.max_chars_per_token(), max_model_len)

    def _set_string_bounds(self, per_token: int | None, max_model_len: int) -> None:
        """The longest prompt and string a request that fits may hold."""
        # longest text that might fit (NOTE(bounded-work)); None: no bound can be trusted
        self.max_prompt_chars = None if per_token is None else max_model_len * per_token
        # NOTE(string-bound): every string of a fitting request is at most max_prompt_chars
        # characters: a prompt or message content by NOTE(bounded-work), a stop string because
        # longer ones could never match the generated text; ``user``, schemas and the rest
        # get the same bound, at least MIN_STRING_BOUND bytes. A longer string in the raw
        # body is refused before decoding (json.loads of a 4 MB string holds the GIL ~10 ms)
        self.max_string_bytes = None if per_token is None else max(
            MIN_STRING_BOUND, self.max_prompt_chars * MAX_JSON_BYTES_PER_CHAR)

    # ---- body -------------------------------------------------------------------------------
    def decode_body(self, raw: bytes) -> dict[str, Any]:
        """UTF-8 JSON object, bounded depth, value count and string length (json_body.py)."""
        return decode_json_body(raw, max_json_depth=self.max_json_depth,
                                max_body_commas=self.max_body_commas,
                                max_model_len=self.max_model_len,
                                max_string_bytes=self.max_string_bytes)

    # ---- endpoints --------------------------------------------------------------------------
    def parse_completion(self, body: dict[str, Any]) -> ParsedRequest:
        ignored = self.fields.check(body, KNOWN_COMPLETION)
        body = with_defaults(body, self.defaults)
        if "response_format" in body or "structured_outputs" in body:  # NOTE(format-unheeded)
            body, ignored = unheeded_keys(body, ignored, self.fields)
        model = self.models.resolve(body.get("model"))
        check_unsupported(body, UNSUPPORTED_COMPLETION)
        extras = self._extras(body, chat=False)
        prompts = self._prompts(body.get("prompt"), extras)
        echo_only = json_int(body.get("max_tokens")) == 0 and bool(json_bool(body.get("echo")))
        max_tokens = 1 if echo_only else self._max_tokens(body, ("max_tokens",))
        return self._finish(body, "completion", model, prompts, "prompt", max_tokens,
                            DEFAULT_COMPLETION_MAX_TOKENS, echo_only=echo_only,
                            ignored=ignored, extras=extras)

    def parse_chat(self, body: dict[str, Any]) -> ParsedRequest:
        ignored = self.fields.check(body, KNOWN_CHAT)
        body = with_defaults(body, self.defaults)
        model = self.models.resolve(body.get("model"))
        check_unsupported(body, UNSUPPORTED_CHAT)
        extras = self._extras(body, chat=True)
        tools = parse_tool_request(body, self.tool_parser)
        if "response_format" in body or "structured_outputs" in body:  # NOTE(format-unheeded)
            body, ignored = unheeded_keys(body, ignored, self.fields)
        if tools is not None and tools.grammar is not None:  # NOTE(tool-forced)
            body, ignored, tools = drop_for_forced_tool(body, ignored, tools)
        ids, messages, text = self._chat_ids(body, extras, tools.tools if tools else None)
        # vLLM's chat echo: only a final assistant message (the one being continued) comes back
        echo = messages[-1][1] if extras.echo and messages[-1][0] == "assistant" else ""
        # NOTE(max_tokens): max_completion_tokens (OpenAI's newer field) wins over max_tokens
        max_tokens = self._max_tokens(body, ("max_completion_tokens", "max_tokens"))
        req = self._finish(body, "chat", model, [(ids, None)], "messages", max_tokens,
                           None, ignored=ignored, extras=extras, echo_text=echo, tools=tools)
        req = read_reasoning(req, body, self.reasoning_parser, extras.chat_template_kwargs)
        return dataclasses.replace(req, prompt_text=text) if extras.prompt_text else req

    def parse_tokenize(self, body: dict[str, Any]) -> list[int]:
        """vLLM's /tokenize body: ``prompt`` (``add_special_tokens``, default true) or
        ``messages`` (rendered as chat completions render them: the same ids, the same
        ``chat_template`` / ``chat_template_kwargs`` / ``tools`` / ``reasoning_effort``, the
        server's --default-chat-template-kwargs under the request's, key by key, as vLLM's
        /tokenize and count_tokens render them). Never truncated, as vLLM's: chat-only fields
        (truncate_prompt_tokens, echo...) are unknown here and unread. The route checks unknown
        fields first (tokenize_routes.py)."""
        body = {k: v for k, v in body.items() if k in KNOWN_TOKENIZE}
        kwargs = self.defaults.get("chat_template_kwargs")
        if kwargs and body.get("messages") is not None:  # no other default: no sampling
            body = with_defaults(body, {"chat_template_kwargs": kwargs})
        self.models.resolve(body.get("model"))
        prompt, messages = body.get("prompt"), body.get("messages")
        if (prompt is None) == (messages is None):
            raise _bad("prompt", "give exactly one of prompt or messages")
        opt(body, "return_token_strs", bool, False)  # the route reads it
        extras = self._extras(body, chat=True)
        add = extras.add_special_tokens
        if messages is not None:
            return self._chat_ids(body, extras, template_tools(body))[0]
        if not isinstance(prompt, str):
            raise _bad("prompt", "must be a string")
        return self.tokenizer.encode(prompt, add_special_tokens=True if add is None else add)

    def parse_detokenize(self, body: dict[str, Any]) -> str:
        """vLLM's /detokenize body: ``tokens`` (in the vocabulary); unknown fields: the route."""
        self.models.resolve(body.get("model"))
        ids = token_ids(body.get("tokens"), "tokens", self.vocab_size)
        return self.tokenizer.decode(ids, skip_special_tokens=False)  # vLLM keeps them

    def _chat_ids(self, body: dict[str, Any], extras: VllmExtras,
                  tools: Sequence[dict[str, Any]] | None = None
                  ) -> tuple[list[int], list[tuple], str]:
        """(ids, messages, the rendered text); ``tools``: what the template renders (the
        request's, as sent)."""
        messages = parse_messages(body.get("messages"))
        # vLLM's rule: continuing the last assistant message contradicts opening a new turn
        add_gen = opt(body, "add_generation_prompt", bool, True)
        cont = opt(body, "continue_final_message", bool, False)
        if add_gen and cont and body.get("add_generation_prompt") is not None:
            raise _bad("continue_final_message", "cannot be true together with "
                       "add_generation_prompt (set add_generation_prompt to false)")
        tpl = self.templates.pick(extras.chat_template)
        text = tpl.render(messages, add_generation_prompt=add_gen and not cont,
                          continue_final_message=cont,
                          variables=dict(extras.chat_template_kwargs),
                          tools=tools)
        add = extras.add_special_tokens
        ids = self._encode(text, "messages", tpl.add_special_tokens if add is None else add,
                           extras)
        return _truncate(ids, extras), messages, text

    # ---- pieces -----------------------------------------------------------------------------
    def _finish(self, body: dict[str, Any], kind: str, model: str,
                prompts: list[tuple[list[int], str | None]], prompt_param: str,
                max_tokens: int | None, default_max: int | None, *,
                echo_only: bool = False, ignored: tuple[str, ...] = (),
                extras: VllmExtras = VllmExtras(), echo_text: str = "",
                tools: ToolRequest | None = None) -> ParsedRequest:
        budgets = self._budget(prompts, prompt_param, max_tokens, default_max)
        stream = opt(body, "stream", bool, False)
        include_usage, continuous = stream_options(body.get("stream_options"), stream)
        n = opt(body, "n", int, 1)
        if not 1 <= n <= self.max_n:
            raise _bad("n", f"must be between 1 and {self.max_n}, got {shown(n)}")
        best_of, ignored = read_best_of(body, n, stream, self.max_best_of, ignored, kind == "chat")
        salt, priority = salt_and_priority(body)
        lp, prompt_lps = self._logprobs(body, kind == "chat", stream)
        # best_of > n: best_of run, the n of highest cumulative logprob return (vLLM v0's
        # rule), so each sampled token's logprob is needed even when none is shown
        engine_lps = lp.logprobs if best_of == n or lp.logprobs is not None else 0
        params = SamplingParams(
            n=best_of, max_tokens=budgets[0],
            temperature=opt(body, "temperature", float, 1.0),
            top_p=opt(body, "top_p", float, 1.0),
            top_k=self._top_k(body),
            seed=seed_field(body),
            stop=stop_strings(body.get("stop"), self.max_stop),
            stop_token_ids=token_ids(body.get("stop_token_ids"), "stop_token_ids",
                                     self.vocab_size, allow_none=True, lax=True),
            ignore_eos=opt(body, "ignore_eos", bool, False),
            logprobs=engine_lps, prompt_logprobs=prompt_lps, logprob_token_ids=lp.token_ids,
            **self._controls(body, tools))
        return ParsedRequest(kind=kind, model=model, prompt_ids=prompts[0][0], params=params,
                             stream=stream, include_usage=include_usage, cache_salt=salt,
                             priority=priority, user=opt(body, "user", str, None),
                             prompts=tuple(ids for ids, _ in prompts),
                             prompt_texts=tuple(t for _, t in prompts), logprob=lp,
                             echo_only=echo_only, ignored=ignored, extras=extras,
                             continuous_usage=continuous, echo_text=echo_text,
                             return_n=n if best_of > n else None,
                             budgets=budgets if len(set(budgets)) > 1 else (),
                             tools=tools if tools is not None and tools.extracts else None)

    def _budget(self, prompts: list[tuple[list[int], str | None]], prompt_param: str,
                max_tokens: int | None, default_max: int | None) -> tuple[int, ...]:
        """The one empty-prompt and context-length rule (the engine trusts the edge): the
        tokens each prompt may generate, clamped to the room it leaves (context_budget.py)."""
        empty = next((i for i, (ids, text) in enumerate(prompts) if not ids or text == ""), None)
        if empty is not None:
            raise _bad(prompt_param, "must not be empty" if len(prompts) == 1
                       else f"prompt {empty}: must not be empty")
        return token_budgets([len(ids) for ids, _ in prompts], max_tokens,
                             self.default_max_tokens or default_max,
                             max_model_len=self.max_model_len, limit=self.max_tokens_limit,
                             prompt_param=prompt_param, ceiling=self.max_tokens_ceiling)

    def _extras(self, body: dict[str, Any], chat: bool) -> VllmExtras:
        """vLLM's extras (vllm_fields.py); the defaults when the body sends none of them."""
        if (CHAT_EXTRAS if chat else COMPLETION_EXTRAS).isdisjoint(body):
            return VllmExtras()
        return parse_vllm_extras(body, chat=chat, max_model_len=self.max_model_len)

    def _logprobs(self, body: dict[str, Any], chat: bool,
                  stream: bool) -> tuple[LogprobRequest, int | None]:
        """The logprob fields (logprob_fields.py) and the prompt logprobs the engine computes."""
        if LOGPROB_FIELDS.isdisjoint(body):
            return NO_LOGPROBS, None
        lp = parse_logprob_fields(body, chat=chat, max_logprobs=self.max_logprobs, stream=stream,
                                  vocab_size=self.vocab_size)
        return lp, lp.engine_prompt_logprobs

    def _controls(self, body: dict[str, Any], tools: ToolRequest | None) -> dict[str, Any]:
        """Sampling controls (none sent: SamplingParams' defaults); tool_choice required /
        named bring their own grammar, and a parser whose markers are special tokens gets them
        in the text (vLLM's rule too)."""
        out = {} if SAMPLING_FIELDS.isdisjoint(body) else parse_sampling_controls(
            body, self.logits_size, self.tokenizer)  # NOTE(logits-size)
        if tools is not None and tools.parser is not None and tools.parser.keeps_special_tokens:
            out.setdefault("skip_special_tokens", False)
        if tools is not None and tools.grammar is not None:  # its constraint fields: dropped
            out["response_format"] = tools.grammar  # (forced_tool_fields.py NOTE(tool-forced))
        return out

    def _top_k(self, body: dict[str, Any]) -> int:
        # NOTE(bounds): an unbounded top_k overflowed a tensor inside the engine step and took
        # the whole engine down. Past the vocabulary it filters nothing: -1 (off).
        top_k = opt(body, "top_k", int, -1)
        if top_k >= INT32:
            raise _bad("top_k", f"must be below 2**31 (or -1/0 to disable), got {shown(top_k)}")
        return -1 if top_k > self.vocab_size else top_k

    def _max_tokens(self, body: dict[str, Any], names: Sequence[str]) -> int | None:
        for name in names:
            value = opt(body, name, int, None)
            if value is None:
                continue
            if value < 1:
                hint = " (0 only with echo: the prompt's logprobs alone)" \
                    if value == 0 and name == "max_tokens" and "echo" in body else ""
                raise _bad(name, f"must be at least 1{hint}, got {shown(value)}")
            if value > self.max_tokens_limit:
                raise _bad(name, f"must be at most {self.max_tokens_limit}, got {shown(value)}")
            return value
        return None

    def _prompts(self, prompt: Any, extras: VllmExtras) -> list[tuple[list[int], str | None]]:
        """(ids, text or None) per prompt: a string, token ids, or a list of either kind."""
        if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list))
                                                       for p in prompt):
            if len(prompt) > self.max_prompts:
                raise _bad("prompt", f"at most {self.max_prompts} prompts per request, got "
                           f"{len(prompt)}")
            kinds = {type(p) for p in prompt}
            if len(kinds) > 1:
                raise _bad("prompt", "a batch of prompts must be all strings or all lists of "
                           "token ids")
            out = []
            for i, p in enumerate(prompt):
                try:
                    out.append(self._one_prompt(p, extras))
                except RequestError as exc:
                    raise _bad("prompt", f"prompt {i}: {exc}".replace("prompt: ", "", 1),
                               exc.code) from None
            return out
        return [self._one_prompt(prompt, extras)]

    def _one_prompt(self, prompt: Any, extras: VllmExtras) -> tuple[list[int], str | None]:
        keep = extras.truncate_prompt_tokens
        if isinstance(prompt, str):
            add = extras.add_special_tokens
            ids = self._encode(prompt, "prompt", True if add is None else add, extras)
            # a truncated prompt is no longer the text sent: echo decodes the ids kept
            return _truncate(ids, extras), prompt if keep is None or len(ids) <= keep else None
        if isinstance(prompt, list):
            prompt = _truncate(prompt, extras)
            if exceeds_context(len(prompt), 1, self.max_model_len):  # before the per-id walk
                raise self._too_long("prompt", f"the prompt has {len(prompt)} tokens")
            return token_ids(prompt, "prompt", self.vocab_size), None
        if prompt is None:
            raise _bad("prompt", "is required")
        raise _bad("prompt", "must be a string, a list of token ids, or a list of those")

    def _encode(self, text: str, param: str, add_special_tokens: bool = True,
                extras: VllmExtras | None = None) -> list[int]:
        """Tokenize, unless the text is too long to fit (NOTE(bounded-work)); a prompt to be
        truncated is first cut to the bound on the side it keeps, as vLLM's _text_len_check
        cuts it (still at least max_model_len tokens). GIL-free, so a caller may run the parse
        on a worker thread without stalling the event loop."""
        limit = self.max_prompt_chars
        if limit is not None and len(text) > limit and extras is not None \
                and extras.truncate_prompt_tokens is not None:
            text = text[:limit] if extras.truncation_side == "right" else text[-limit:]
        if limit is not None and len(text) > limit:
            raise self._too_long(param, f"the prompt has {len(text)} characters, more than "
                                 f"{self.max_model_len} tokens can hold")
        return self.tokenizer.encode_unlocked(text, add_special_tokens=add_special_tokens)

    def _too_long(self, param: str, what: str) -> RequestError:
        return context_length_error(self.max_model_len, f"{what}, which leaves no room to "
                                    "generate", param, named=True)
