"""RowSampler: a step's tokens, one per sampled row, and the rows whose grammar mask is late.

NOTE(late-mask): a grammar row's token mask is computed on the mask thread beside the forward
(GrammarMatchers NOTE(overlap)). Sampling waits for it at most GRACE_S when the step also
has rows without a grammar; a mask later than that would stall those rows, so the grammar rows
of that mask are not sampled this step: their logits rows are kept, the scheduler is told they
are ``deferred`` (it schedules them no more: Sequence.awaiting) and once the mask is done
``take_late`` samples them from the kept logits exactly as the step would have (same logits,
mask, generator and history), before the next schedule(). So a heavy grammar costs its own
latency, not its neighbours'. Waited for instead: a step with grammar rows only (nobody to
protect), a row late MAX_LATE_STEPS steps (the fuel in LIMITS bounds a mask, this bounds its
wait), and ``take_late(wait=True)`` when the scheduler has nothing else to run.

A deferred sequence that is recomputed (preempted) drops its kept row: the recompute's last
chunk samples it afresh; one that is swapped out keeps it until it runs again.

NOTE(think-budget): vLLM's ``thinking_token_budget`` (SamplingParams.think_budget). A sequence
has a count of thinking tokens left; each token it samples while thinking spends one (the
start tag spends none) until it samples the end tag. Once none are left, its next token is the
end tag, whatever was sampled: the token is replaced before its logprobs, its grammar (which
waits for that tag, NOTE(think-grammar)) and the output see it, so its logprob is the model's
for the tag. A budget of 0 forces the tag as the first token. Where the output opens in its
answer and each start tag opens a thinking (Mistral's ``[THINK]``), the count is shared by
all of them: it runs while one is open, and once it is spent a thinking that opens is closed
at its next token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from kvpool.runtime.engine.output_processor import OutputProcessor, Sample
from kvpool.runtime.model import Sampler, SamplingParams, compute_logprobs, make_generator
from kvpool.runtime.model.grammar import TokenMask
from kvpool.runtime.model.grammar_matchers import GrammarMatchers, LateMask
from kvpool.sched import SeqStatus

__all__ = ["Drawn", "RowSampler"]

GRACE_S = 0.002  # a light grammar's mask is ready by then; the neighbours wait no longer
MAX_LATE_STEPS = 32


@dataclass(slots=True)
class Drawn:
    """What one sampling pass produced."""

    samples: list[Sample] = field(default_factory=list)
    done: list[int] = field(default_factory=list)  # sequences whose grammar completed
    deferred: list[int] = field(default_factory=list)  # sequences sampled later (late mask)


@dataclass(slots=True, eq=False)
class _Late:
    sample: Sample
    logits: torch.Tensor  # its row of the step's logits
    params: SamplingParams
    mask: LateMask
    row: int  # its row in ``mask``
    step: int  # the step that deferred it


class RowSampler:
    """The sampler, one generator per sequence, and the rows deferred for a late mask."""

    def __init__(self, sampler: Sampler, outputs: OutputProcessor,
                 grammars: GrammarMatchers) -> None:
        self.sampler = sampler
        self.outputs = outputs
        self.grammars = grammars
        self._gens: dict[int, torch.Generator | None] = {}  # seq_id -> per-request generator
        self._late: dict[int, _Late] = {}  # seq_id -> its deferred row
        # seq_id -> [thinking tokens left, whether a thinking is open] (NOTE(think-budget))
        self._think: dict[int, list] = {}
        self.max_late_steps = MAX_LATE_STEPS

    def add(self, seq_ids, seed: int | None,
            budget: tuple[int, int, int, int] | None = None) -> None:
        for i, s in enumerate(seq_ids):
            self._gens[s] = make_generator(None if seed is None else seed + i)
            if budget is not None:
                self._think[s] = [budget[0], not budget[3]]

    def remove(self, seq_id: int) -> None:
        self._gens.pop(seq_id, None)
        self._late.pop(seq_id, None)
        self._think.pop(seq_id, None)

    def _spend(self, samples: list[Sample], params: list[SamplingParams],
               tokens: list[int]) -> bool:
        """NOTE(think-budget): spend each thinking row's budget on its token; a row with
        none left gets the end tag instead. Whether a token was replaced."""
        forced = False
        for j, s in enumerate(samples):
            state = self._think.get(s.seq_id)
            if state is None:
                continue
            _, start, end, reopens = params[j].think_budget
            if not state[1]:  # in the answer: a start tag opens a thinking
                state[1] = tokens[j] == start
                continue
            if state[0] <= 0 and tokens[j] != end:
                tokens[j], forced = end, True
            if tokens[j] == end:
                if reopens:
                    state[1] = False
                else:
                    del self._think[s.seq_id]
            elif tokens[j] != start:
                state[0] -= 1
        return forced

    @property
    def has_late(self) -> bool:
        return bool(self._late)

    def sample(self, logits: torch.Tensor, entries: list, step: int) -> Drawn:
        """One token per sampled row of ``entries`` (their rows of ``logits``), except the
        grammar rows deferred for a late mask (NOTE(late-mask))."""
        idx, params, samples = [], [], []
        reqs = self.outputs.requests
        for i, e in enumerate(entries):
            r = reqs.get(e.request_id)
            if r is None:
                continue
            for s in e.sample_seq_ids:  # a prefill chunk: none before its last token
                idx.append(i)
                params.append(r.params)
                samples.append(Sample(s, e.request_id, 0))
        if not idx:
            return Drawn()
        picked = logits[torch.tensor(idx)] if len(idx) != logits.shape[0] or idx != list(
            range(len(idx))) else logits
        seqs = [s.seq_id for s in samples]
        if not self.grammars.matchers:  # no grammar anywhere: no mask to wait for
            return self._draw(picked, params, samples, None)
        others = any(s not in self.grammars for s in seqs)  # unconstrained rows
        mask = self.grammars.token_mask(seqs, GRACE_S if others else None)
        if not isinstance(mask, LateMask):
            return self._draw(picked, params, samples, mask)
        for k, j in enumerate(mask.rows):
            self._late[seqs[j]] = _Late(samples[j], picked[j].clone(), params[j], mask, k, step)
        late = set(mask.rows)
        keep = [j for j in range(len(seqs)) if j not in late]
        drawn = self._draw(picked[torch.tensor(keep)], [params[j] for j in keep],
                           [samples[j] for j in keep], None)
        drawn.deferred = [seqs[j] for j in mask.rows]
        return drawn

    def take_late(self, awaiting: Callable[[int], SeqStatus | None], step: int,
                  wait: bool) -> Drawn:
        """Sample the deferred rows whose mask is done (all of them with ``wait``, and those
        late ``max_late_steps`` steps, waiting for their mask) and whose sequence runs
        (``awaiting``: the scheduler's answer; None drops the row)."""
        groups: dict[LateMask, list[_Late]] = {}
        for s, e in list(self._late.items()):
            status = awaiting(s)
            if status is None:
                del self._late[s]
            elif status is SeqStatus.RUNNING and (
                    wait or e.mask.done() or step - e.step >= self.max_late_steps):
                groups.setdefault(e.mask, []).append(e)
        drawn = Drawn()
        for late, es in groups.items():
            for e in es:
                del self._late[e.sample.seq_id]
            mask = self.grammars.late_mask(late, [e.row for e in es])
            d = self._draw(torch.stack([e.logits for e in es]), [e.params for e in es],
                           [e.sample for e in es], mask)
            drawn.samples += d.samples
            drawn.done += d.done
        return drawn

    def _draw(self, picked: torch.Tensor, params: list[SamplingParams], samples: list[Sample],
              mask: TokenMask | None) -> Drawn:
        """Sample ``picked`` (one row per sample), then the logprobs and grammars."""
        if not samples:
            return Drawn()
        gens = [self._gens.get(s.seq_id) for s in samples]
        hist = None
        if any(p.needs_history for p in params):  # penalties / min_tokens read the tokens
            hist = [self.outputs.history(s.request_id, s.seq_id) for s in samples]
        chosen = self.sampler(picked, params, gens, hist, token_mask=mask)
        tokens = chosen.tolist()
        if self._think and self._spend(samples, params, tokens):  # NOTE(think-budget)
            chosen = torch.tensor(tokens, dtype=chosen.dtype, device=chosen.device)
        for s, t in zip(samples, tokens):
            s.token_id = t
        want = [j for j, p in enumerate(params) if p.logprobs is not None]
        if want:  # raw-model logprobs of what was sampled (model/logprobs.py NOTE(raw-logprobs))
            sel = picked if len(want) == len(params) else picked[torch.tensor(want)]
            ids = chosen if len(want) == len(params) else chosen[torch.tensor(want)]
            values = compute_logprobs(sel, ids, [params[j].logprobs for j in want],
                                      [params[j].logprob_token_ids for j in want])
            for j, v in zip(want, values):
                samples[j].logprob = v
        done = []
        if mask is not None or self.grammars.waiting:  # NOTE(think-grammar): a waiting row
            # has no mask; advance sees its token. The JSON complete: the sequence stops
            done = self.grammars.advance([s.seq_id for s in samples], tokens)
        return Drawn(samples, done)
