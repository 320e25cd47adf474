"""Per-request sampling parameters and a batched sampler over ``logits [num_seqs, vocab]``.

Pipeline per row (rows with ``temperature == 0`` skip the second line and take the argmax)::

    logits -> logit_bias, min_tokens, repetition/frequency/presence penalties (penalties.py)
      / temperature -> min_p -> top-k mask -> top-p mask (on the top-k renormalized distribution)
      -> softmax -> token = argmax(probs / E),  E ~ Exponential(1) i.i.d. per vocab entry

The last step is the exponential-race form of categorical sampling: ``argmax(p_i / E_i)`` is
distributed as ``p``. Its noise for a seeded request comes only from that request's own
``torch.Generator`` and always consumes exactly ``vocab`` draws per step, so the same seed gives
the same tokens whatever else shares the batch (given the same logits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from kvpool.errors import RequestError, shown

from .grammar import GrammarSpec, TokenMask, apply_token_mask
from .penalties import SeqHistory, apply_logit_adjustments, apply_min_p
from .repetition import RepeatStop

__all__ = ["Sampler", "SamplingParams", "SamplingParamsError", "SeqHistory", "make_generator"]

GREEDY_TEMPERATURE = 1e-5  # below this a temperature means greedy (dividing would overflow)
_SEED_MOD = 1 << 64
MAX_LOGIT_BIAS = 100.0  # OpenAI's bound on one logit_bias value
MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's bound on logprob_token_ids
# NOTE(float32): sampling runs in float32 (max ~3.4e38, smallest normal ~1.2e-38). A value
# beyond these bounds rounds to inf or 0 there: 1e300 becomes inf and a masked logit's
# -inf / inf is NaN, so softmax (and the grammar mask behind it) turns to garbage. Within
# them a logit (|x| < ~1e3 after a +-100 bias) divided by 1e-4 or 1e-5 stays below 1e8.
# Temperature and top_p take vLLM 0.33's ranges ([0, 2] and (0, 1], its _verify_args): a
# request vLLM refuses is a 400 here too, not output sampled near uniform or greedy.
MAX_TEMPERATURE = 2.0
MIN_REPETITION_PENALTY = 1e-4
MAX_REPETITION_PENALTY = 1e4


class SamplingParamsError(RequestError):
    """An invalid sampling field; ``param`` names it (the OpenAI error's ``param``, HTTP 400)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}", param=param)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_range(params: Any, name: str, lo: float, hi: float, open_lo: bool = False) -> None:
    """``name`` must be a number in [lo, hi] (``open_lo``: in (lo, hi]); stored as a float.
    Compared before any float() conversion: a 400-digit JSON integer is a 400, not an
    OverflowError, and NaN fails every comparison."""
    v = getattr(params, name)
    if not _is_number(v) or not (lo < v if open_lo else lo <= v) or not v <= hi:
        raise SamplingParamsError(name, f"must be a number in {'(' if open_lo else '['}"
                                        f"{lo:g}, {hi:g}], got {shown(v)}")
    object.__setattr__(params, name, float(v))


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request samples and when it stops. Validated on construction.

    ``stop`` accepts a string or a sequence of strings and is stored as a tuple, as is
    ``stop_token_ids``; ``top_k`` of 0 or -1 and ``top_p`` of 1 disable those filters.
    """

    n: int = 1  # completions per prompt
    max_tokens: int | None = 16  # None: up to the model's context limit (the engine decides)
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # nucleus mass kept, in [0, 1]
    top_k: int = -1  # keep the k most likely tokens; -1 or 0 = off
    seed: int | None = None  # per-request generator; None (or -1) = the sampler's shared RNG
    stop: tuple[str, ...] = ()  # stop strings (excluded from the output text)
    stop_token_ids: tuple[int, ...] = ()  # extra token ids that end the sequence
    ignore_eos: bool = False  # keep generating past EOS (benchmarks)
    presence_penalty: float = 0.0  # OpenAI: minus this once a token was generated, [-2, 2]
    frequency_penalty: float = 0.0  # OpenAI: minus this per time a token was generated, [-2, 2]
    repetition_penalty: float = 1.0  # vLLM/HF: prompt+generated tokens, > 0; 1 = off
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias in [-100, 100]), by id
    min_tokens: int = 0  # eos / stop_token_ids masked until this many were generated
    min_p: float = 0.0  # keep tokens with prob >= min_p * top prob, [0, 1]; 0 = off
    response_format: GrammarSpec | None = None  # structured output (grammar.py); None = text
    logprobs: int | None = None  # per generated token: its logprob + this many top ones
    prompt_logprobs: int | None = None  # per prompt token (vLLM): logprob + this many top ones
    # vLLM's extras
    allowed_token_ids: tuple[int, ...] = ()  # sample only among these (empty: all)
    bad_words_ids: tuple[tuple[int, ...], ...] = ()  # token sequences never completed
    include_stop_str_in_output: bool = False  # keep the matched stop string in the text
    skip_special_tokens: bool = True  # special tokens (</s>...) left out of the text
    repetition_detection: RepeatStop | None = None  # an early stop on a loop (repetition.py)
    stream_interval: int = 1  # new tokens per streamed update, at least (NOTE(interval))
    # vLLM's: with logprobs, these tokens' logprobs instead of the top k (logprobs.py NOTE(picks))
    logprob_token_ids: tuple[int, ...] = ()
    # vLLM's thinking_token_budget: (tokens of thinking allowed, the start tag's id, the end
    # tag's id, forced once they are spent; 1 where the output opens in its answer and each
    # start tag opens a thinking, 0 where it opens in its thinking) (row_sampler.py
    # NOTE(think-budget)); None: no budget
    think_budget: tuple[int, int, int, int] | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.n) or self.n < 1:
            raise SamplingParamsError("n", f"must be an integer >= 1, got {shown(self.n)}")
        if self.max_tokens is not None and (not _is_int(self.max_tokens) or self.max_tokens < 1):
            raise SamplingParamsError("max_tokens",
                                      f"must be an integer >= 1, got {shown(self.max_tokens)}")
        _check_range(self, "temperature", 0.0, MAX_TEMPERATURE)  # NOTE(float32)
        _check_range(self, "top_p", 0.0, 1.0, open_lo=True)  # vLLM's (0, 1]
        if not _is_int(self.top_k) or self.top_k < -1:
            raise SamplingParamsError("top_k", f"must be an integer >= 1, or -1/0 to disable, "
                                               f"got {shown(self.top_k)}")
        self._check_seed()
        stop = self.stop
        if isinstance(stop, str):
            stop = (stop,)
        if stop is None:
            stop = ()
        if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
            raise SamplingParamsError("stop", f"must be a non-empty string or a list of non-empty "
                                              f"strings, got {self.stop!r}")
        object.__setattr__(self, "stop", tuple(stop))
        ids = () if self.stop_token_ids is None else self.stop_token_ids
        if not isinstance(ids, (list, tuple)) or not all(_is_int(i) and i >= 0 for i in ids):
            raise SamplingParamsError("stop_token_ids", f"must be a list of integers >= 0, "
                                                        f"got {self.stop_token_ids!r}")
        object.__setattr__(self, "stop_token_ids", tuple(ids))
        if not isinstance(self.ignore_eos, bool):
            raise SamplingParamsError("ignore_eos", f"must be a boolean, got {self.ignore_eos!r}")
        if self.response_format is not None and not isinstance(self.response_format,
                                                               GrammarSpec):
            raise SamplingParamsError("response_format", "must be a GrammarSpec (grammar.py)")
        self._check_adjustments()
        self._check_vllm_extras()
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 0):
                raise SamplingParamsError(name, f"must be an integer >= 0 or null, got {shown(v)}")

    def _check_seed(self) -> None:
        if _is_int(self.seed) and self.seed == -1:
            # NOTE(seed-unset): vLLM's SamplingParams.__post_init__ turns seed -1 into None
            # (unseeded): clients in vLLM's dialect send -1 to ask for random output, so it must
            # not pin every such request to one fixed sample
            object.__setattr__(self, "seed", None)
        if self.seed is not None and (not _is_int(self.seed)
                                      or not -(1 << 63) <= self.seed < _SEED_MOD):
            raise SamplingParamsError("seed",
                                      f"must be a 64-bit integer or null, got {shown(self.seed)}")

    def _check_adjustments(self) -> None:
        _check_range(self, "presence_penalty", -2.0, 2.0)
        _check_range(self, "frequency_penalty", -2.0, 2.0)
        # 1 = off; NOTE(float32) for the bounds
        _check_range(self, "repetition_penalty", MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY)
        _check_range(self, "min_p", 0.0, 1.0)
        mt = self.min_tokens
        if not _is_int(mt) or mt < 0:
            raise SamplingParamsError("min_tokens", f"must be an integer >= 0, got {shown(mt)}")
        if self.max_tokens is not None and mt > self.max_tokens:
            raise SamplingParamsError("min_tokens", f"must be at most max_tokens "
                                                    f"({self.max_tokens}), got {shown(mt)}")
        bias = self.logit_bias
        items = bias.items() if isinstance(bias, dict) else (bias or ())
        try:
            pairs = tuple(sorted((t, b) for t, b in items))
        except (TypeError, ValueError):
            raise SamplingParamsError("logit_bias", "must map token ids to numbers") from None
        for t, b in pairs:
            if not _is_int(t) or t < 0:
                raise SamplingParamsError("logit_bias", f"token id must be an integer >= 0, "
                                                        f"got {shown(t)}")
            if not _is_number(b) or not -MAX_LOGIT_BIAS <= b <= MAX_LOGIT_BIAS:
                raise SamplingParamsError("logit_bias", f"bias for token {t} must be a number "
                                                        f"in [-100, 100], got {shown(b)}")
        object.__setattr__(self, "logit_bias", tuple((t, float(b)) for t, b in pairs))

    def _check_vllm_extras(self) -> None:
        for name in ("include_stop_str_in_output", "skip_special_tokens"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise SamplingParamsError(name, f"must be a boolean, got {shown(v)}")
        ids = tuple(self.allowed_token_ids or ())
        if not all(_is_int(t) and t >= 0 for t in ids):
            raise SamplingParamsError("allowed_token_ids", "must be token ids >= 0")
        object.__setattr__(self, "allowed_token_ids", ids)
        words = tuple(tuple(w) for w in (self.bad_words_ids or ()))
        if not all(w and all(_is_int(t) and t >= 0 for t in w) for w in words):
            raise SamplingParamsError("bad_words", "must be non-empty token id sequences")
        object.__setattr__(self, "bad_words_ids", words)
        b = self.think_budget
        if b is not None and not (isinstance(b, tuple) and len(b) == 4 and b[3] in (0, 1)
                                  and all(_is_int(x) and x >= 0 for x in b)):
            raise SamplingParamsError("thinking_token_budget", "must be an integer >= 0 "
                                      "(with the think tags' ids)")
        if not _is_int(self.stream_interval) or self.stream_interval < 1:
            raise SamplingParamsError("stream_interval", f"must be an integer >= 1, got "
                                                         f"{shown(self.stream_interval)}")
        picks = tuple(self.logprob_token_ids or ())
        if len(picks) > MAX_LOGPROB_TOKEN_IDS or not all(_is_int(t) and t >= 0 for t in picks):
            raise SamplingParamsError("logprob_token_ids", f"must be at most "
                                      f"{MAX_LOGPROB_TOKEN_IDS} token ids >= 0")
        object.__setattr__(self, "logprob_token_ids", picks)
        rep = self.repetition_detection
        if rep is not None and not isinstance(rep, RepeatStop):
            raise SamplingParamsError("repetition_detection", "must be a RepeatStop "
                                                              "(repetition.py) or None")

    @property
    def adjusts_logits(self) -> bool:
        """Whether any of bias / min_tokens / penalties / allowed_token_ids / bad words applies
        (the sampler's fast check)."""
        return bool(self.logit_bias or self.allowed_token_ids) or self.needs_history

    @property
    def needs_history(self) -> bool:
        """Whether the sampler needs this row's prompt and generated ids (penalties,
        min_tokens, bad words: penalties.py reads it too)."""
        return bool(self.min_tokens or self.frequency_penalty or self.presence_penalty
                    or self.repetition_penalty != 1.0 or self.bad_words_ids)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE

    def make_generator(self, device: torch.device | str = "cpu") -> torch.Generator | None:
        return make_generator(self.seed, device)


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator | None:
    """A generator seeded with ``seed`` (None -> None). Create one per request and keep it for
    the request's lifetime (and per completion when ``n > 1``: seed, seed+1, ...)."""
    if seed is None:
        return None
    seed %= _SEED_MOD  # vLLM's seeds are int64: -2 and 2**64 - 2 are one seed
    if torch.device(device).type == "cpu":
        seed = cpu_seed(seed)
    return torch.Generator(device=device).manual_seed(seed)


def cpu_seed(seed: int) -> int:
    """NOTE(seed-fold): torch's CPU generator (mt19937) keeps only a seed's low 32 bits, so
    seeds 2**32 apart sampled alike. The high half, through murmur3's 32-bit finalizer (a
    bijection with 0 -> 0), is XORed into the low half: a seed below 2**32 is unchanged (the
    stream it always gave), and seeds that differ in one half alone never collide (n > 1's
    seed, seed + 1, ... differ in the low half unless the sum carries); other pairs collide
    as two random 32-bit seeds would. Generators that keep 64 bits (CUDA's) get the seed."""
    high = seed >> 32
    high ^= high >> 16
    high = (high * 0x85EBCA6B) & 0xFFFFFFFF
    high ^= high >> 13
    high = (high * 0xC2B2AE35) & 0xFFFFFFFF
    high ^= high >> 16
    return (seed & 0xFFFFFFFF) ^ high


class Sampler:
    """Batched sampling; stateless apart from the RNG used for unseeded rows."""

    def __init__(self, generator: torch.Generator | None = None,
                 eos_token_ids: Sequence[int] = ()) -> None:
        self.generator = generator  # for rows without their own generator (None: torch global)
        self.eos_token_ids = tuple(eos_token_ids)  # what min_tokens masks (unless ignore_eos)

    def __call__(self, logits: torch.Tensor, params: Sequence[SamplingParams],
                 generators: Sequence[torch.Generator | None] | None = None,
                 histories: Sequence[SeqHistory] | None = None,
                 token_mask: TokenMask | None = None) -> torch.Tensor:
        """Next token id per row, ``[num_seqs]`` long on ``logits.device``.

        ``generators[i]`` is row i's request generator (or None); it is advanced only when that
        row samples (temperature > 0). ``histories[i]`` (prompt and generated ids) is needed
        only when some row's ``needs_history``. ``token_mask`` (grammar rows only) sets the
        logits of disallowed tokens to -inf after the adjustments, before temperature.
        """
        num, _ = logits.shape
        if len(params) != num or (generators is not None and len(generators) != num):
            raise ValueError(f"need one SamplingParams (and generator) per logits row ({num})")
        if histories is not None and len(histories) != num:
            raise ValueError(f"need one SeqHistory per logits row ({num})")
        logits = self._adjusted(logits, params, histories, token_mask)
        best = logits.argmax(dim=-1)
        rows = [i for i, p in enumerate(params) if not p.greedy]
        if not rows:
            return best
        chosen = self._sample(logits if len(rows) == num else logits[rows],
                              [params[i] for i in rows], rows, generators)
        if len(rows) == num:
            return chosen
        best[rows] = chosen
        return best

    def _adjusted(self, logits: torch.Tensor, params: Sequence[SamplingParams],
                  histories: Sequence[SeqHistory] | None,
                  token_mask: TokenMask | None) -> torch.Tensor:
        """The float32 logits after the rows' adjustments and the grammar mask."""
        logits = raw = logits.float()
        if any(p.adjusts_logits for p in params):
            # NOTE(copy): float() may return the caller's tensor; adjust a copy, never the logits
            # the model handed out.
            logits = apply_logit_adjustments(logits.clone(), params, histories,
                                             self.eos_token_ids)
        if token_mask is not None:
            logits = apply_token_mask(logits.clone() if logits is raw else logits, token_mask,
                                      fallback=raw if logits is not raw else None)
        return logits

    def _sample(self, x: torch.Tensor, params: list[SamplingParams], rows: list[int],
                generators: Sequence[torch.Generator | None] | None) -> torch.Tensor:
        """One token per sampled row: ``x`` (those rows' logits, ``params`` theirs) through
        temperature, min_p, top-k / top-p and the exponential race."""
        vocab = x.shape[-1]
        temps = torch.tensor([p.temperature for p in params], device=x.device)
        x = x / temps[:, None]
        min_p = [float(p.min_p) for p in params]
        if max(min_p) > 0.0:
            x = apply_min_p(x, min_p)
        top_k = [min(p.top_k, vocab) if p.top_k > 0 else vocab for p in params]
        top_p = [float(p.top_p) for p in params]
        if min(top_k) < vocab or min(top_p) < 1.0:
            x = self._filter(x, top_k, top_p)
        probs = torch.softmax(x, dim=-1)
        noise = self._exponential_noise(probs, rows, generators)
        return (probs / noise).argmax(dim=-1)

    @staticmethod
    def _filter(x: torch.Tensor, top_k: list[int], top_p: list[float]) -> torch.Tensor:
        """Set logits outside each row's top-k / top-p set to -inf (the best token always stays)."""
        vocab = x.shape[-1]
        sorted_x, order = x.sort(dim=-1, descending=True)
        rank = torch.arange(vocab, device=x.device)[None, :]
        keep = rank < torch.tensor(top_k, device=x.device)[:, None]
        if min(top_p) < 1.0:
            masked = sorted_x.masked_fill(~keep, float("-inf"))
            p_sorted = torch.softmax(masked, dim=-1)
            mass_before = p_sorted.cumsum(dim=-1) - p_sorted
            keep &= mass_before < torch.tensor(top_p, device=x.device)[:, None]
        keep[:, 0] = True  # top_p == 0 (or rounding) must still leave the argmax
        sorted_x = sorted_x.masked_fill(~keep, float("-inf"))
        return torch.empty_like(x).scatter_(-1, order, sorted_x)

    def _exponential_noise(self, probs: torch.Tensor, rows: list[int],
                           generators: Sequence[torch.Generator | None] | None) -> torch.Tensor:
        noise = torch.empty_like(probs)
        shared: list[int] = []
        for j, i in enumerate(rows):
            gen = generators[i] if generators is not None else None
            if gen is None:
                shared.append(j)
            else:
                noise[j].exponential_(generator=gen)  # exactly `vocab` draws from this request
        if shared:
            draws = torch.empty((len(shared), probs.shape[-1]), device=probs.device)
            noise[shared] = draws.exponential_(generator=self.generator)
        # NOTE(race): an exact 0 draw would turn p/0 into inf (or NaN for p = 0).
        return noise.clamp_min_(1e-20)
