"""Step completion: accepting sampled tokens, stop conditions, finishing and aborting.

Mixed into ``Scheduler``. The runtime's side of one step::

    out = sched.schedule()
    ... copies, forward, sampling, defrag copies (order in kvpool.sched.output) ...
    finished = sched.on_step_done(out, {seq_id: token_id, ...}, stops={seq_id: reason})

``sampled`` must hold a token for every sequence of ``out.decodes`` and of every prefill chunk
with ``is_last``, except sequences aborted or finished while the step ran (those tokens are
dropped). A sequence finishes on a stop token (eos unless ignore_eos: FINISHED_STOPPED), after
``max_tokens`` outputs or at ``max_model_len`` tokens (FINISHED_LENGTH), when the runtime
names it in ``stops`` (a stop string matched the text this token completed: FINISHED_STOPPED
with that reason, before any other check), or when the runtime calls ``finish`` / ``abort``. Its blocks are freed at once; the request is
returned when its last sequence finished. ``on_step_done`` also says every copy of the step
completed: abort a request whose copy failed first, or its swapped-in blocks would be hashed.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvpool.core import DefragResult
from kvpool.errors import SchedulerError
from kvpool.sched.output import FinishedRequest, SchedulerOutput, SeqOutput
from kvpool.sched.sequence import Sequence, SeqStatus, SequenceGroup

_RUNNING = SeqStatus.RUNNING


class CompletionMixin:
    """on_step_done / on_step_failed / finish / abort of Scheduler, and the defrag plan's
    life: _maybe_defrag starts one (schedule() step 5), defrag_done commits or aborts it."""

    def on_step_done(self, output: SchedulerOutput, sampled: Mapping[int, int], *,
                     now: float | None = None, defrag_ok: bool = True,
                     stops: Mapping[int, str] | None = None) -> list[FinishedRequest]:
        """Apply a completed step: record the computed KV (prefix cache), append the sampled
        tokens, check stop conditions (``stops``: seq_id -> the runtime's stop reason, e.g. a
        matched stop string), free finished sequences, and commit the step's defrag
        plan (or abort it when ``defrag_ok`` is false) unless ``defrag_done`` already did.
        Returns the requests that finished in this step."""
        if output is not self._inflight:
            if not output.has_work:
                return []
            raise SchedulerError(f"step {output.step_id} is not the step in flight")
        seqs = self._seqs
        missing = []
        for p in output.prefills:
            if p.is_last:
                missing += [i for i in p.seq_ids if i not in sampled and i in seqs
                            and seqs[i].status is _RUNNING]
        for d in output.decodes:
            i = d.seq_id
            if i not in sampled and i in seqs and seqs[i].status is _RUNNING:
                missing.append(i)
        if missing:
            raise SchedulerError(f"no sampled token for running sequences {missing[:8]}: "
                                 "abort their requests before on_step_done if they failed")
        self._inflight = None
        now = self._clock() if now is None else now
        mgr = self.manager
        done: list[Sequence] = []
        stops = stops or {}
        for p in output.prefills:
            unit = None
            for i in p.seq_ids:
                s = seqs.get(i)
                if s is not None and s.unit is not None:
                    unit = s.unit
                    break
            if unit is None:
                continue  # every sequence of it finished or was aborted meanwhile
            unit.computed = p.end
            live = [s for s in unit.seqs if s.status is _RUNNING]
            for s in live:
                mgr.mark_computed(s.seq_id, p.end)
            if p.end == unit.num_tokens:
                g = live[0].group
                for s in live:
                    s.unit = None
                    self._accept(s, sampled[s.seq_id], now, done, stops.get(s.seq_id))
                if all(s.unit is None for s in g.seqs):
                    g.units = None
        for i in output.swapped_in:
            # NOTE(copy-pending): the step ran, so its swap-in copies completed (a request
            # whose copy failed was aborted before this call): only now may those blocks
            # carry prefix hashes
            s = seqs.get(i)
            if s is not None and s.status is _RUNNING and mgr.has_seq(i):
                mgr.mark_computed(i)
        for d in output.decodes:
            s = seqs.get(d.seq_id)
            if s is not None and s.status is _RUNNING:
                self._accept(s, sampled[d.seq_id], now, done, stops.get(d.seq_id))
        finished = self._retire(done, now)
        plan = self._defrag_plan
        if plan is not None and plan.plan_id == output.defrag_plan_id:
            self.defrag_done(plan.plan_id, defrag_ok)
        return finished

    def on_step_failed(self, output: SchedulerOutput, reason: str = "step failed",
                       now: float | None = None) -> list[FinishedRequest]:
        """The step could not run: abort every request in it (their tables reserved slots
        that were never written) and the defrag plan. Returns the aborted requests."""
        if output is not self._inflight:
            raise SchedulerError(f"step {output.step_id} is not the step in flight")
        self._inflight = None
        if self._defrag_plan is not None and self._defrag_plan.plan_id == output.defrag_plan_id:
            self.defrag_done(output.defrag_plan_id, False)
        rids = dict.fromkeys([p.request_id for p in output.prefills]
                             + [d.request_id for d in output.decodes])
        out = []
        for rid in rids:
            r = self.finish(rid, None, SeqStatus.FINISHED_ABORTED, reason, now=now)
            if r is not None:
                out.append(r)
        return out

    def _accept(self, s: Sequence, token: int, now: float, done: list[Sequence],
                stop: str | None = None) -> None:
        toks = s.output_token_ids
        toks.append(token)
        self.generation_tokens += 1
        g = s.group
        if g.first_token_time is None:
            g.first_token_time = now
        lim = g.limits
        if stop is not None:
            s.status = SeqStatus.FINISHED_STOPPED
            s.finish_reason = stop
        elif token in lim.stop_ids:
            s.status = SeqStatus.FINISHED_STOPPED
            s.finish_reason = "eos" if token == lim.eos_token_id else f"stop_token {token}"
        elif len(toks) >= lim.max_tokens:
            s.status = SeqStatus.FINISHED_LENGTH
            s.finish_reason = "max_tokens"
        elif len(g.prompt_token_ids) + len(toks) >= self.config.max_model_len:
            s.status = SeqStatus.FINISHED_LENGTH
            s.finish_reason = "max_model_len"
        else:
            return
        done.append(s)

    def _retire(self, done: list[Sequence], now: float) -> list[FinishedRequest]:
        """Free the sequences that just finished; return the requests left with none live."""
        if not done:
            return []
        self.manager.free_batch([s.seq_id for s in done])
        self._num_running_seqs -= len(done)
        finished = []
        for s in done:
            s.unit = None
            del self._seqs[s.seq_id]
            g = s.group
            if g.request_id in self._groups and g.num_live == 0:
                self.running.remove(g)
                finished.append(self._close(g, now))
        return finished

    def _close(self, g: SequenceGroup, now: float | None) -> FinishedRequest:
        """Unregister finished group ``g`` (already out of its queue) and report it."""
        del self._groups[g.request_id]
        g.finished_time = self._clock() if now is None else now
        status = g.seqs[0].status
        for s in g.seqs:
            if s.status is SeqStatus.FINISHED_ABORTED or s.status is SeqStatus.FINISHED_IGNORED:
                status = s.status
        g.status = status
        if status is SeqStatus.FINISHED_ABORTED:
            self.num_aborted += 1
        elif status is SeqStatus.FINISHED_IGNORED:
            self.num_ignored += 1
        else:
            self.num_finished += 1
        return FinishedRequest(
            g.request_id, status, g.finish_reason or g.seqs[0].finish_reason,
            tuple(SeqOutput(s.seq_id, list(s.output_token_ids), s.status, s.finish_reason)
                  for s in g.seqs),
            len(g.prompt_token_ids), g.num_cached_tokens or 0, g.arrival_time,
            g.first_scheduled_time, g.first_token_time, g.finished_time, g.num_preemptions,
            g.params)

    def _ignore(self, g: SequenceGroup, out: SchedulerOutput, reason: str) -> None:
        """Reject ``g`` (already out of its queue) as never servable."""
        held = [s.seq_id for s in g.live_seqs if self.manager.has_seq(s.seq_id)]
        if held:
            self.manager.free_batch(held)
        for s in g.live_seqs:
            s.status = SeqStatus.FINISHED_IGNORED
            s.finish_reason = reason
            s.unit = None
            self._seqs.pop(s.seq_id, None)
        g.finish_reason = reason
        out.ignored.append(self._close(g, None))

    # ------------------------------------------------------------------ runtime calls
    def finish(self, request_id: str, seq_id: int | None = None,
               status: SeqStatus = SeqStatus.FINISHED_STOPPED, reason: str | None = "stop",
               *, now: float | None = None) -> FinishedRequest | None:
        """Finish one sequence (``seq_id``) or every live sequence of a request, in any state
        (e.g. the runtime matched a stop string), freeing their blocks at once. Returns the
        request when this left it with no live sequence, else None (also for unknown or
        already finished ids). Safe while a step is in flight: its tokens are then dropped."""
        if not status.is_finished:
            raise SchedulerError(f"finish needs a FINISHED_* status, not {status}")
        g = self._groups.get(request_id)
        if g is None:
            return None
        targets = [s for s in g.live_seqs if seq_id is None or s.seq_id == seq_id]
        if not targets:
            return None
        mgr = self.manager
        held = [s.seq_id for s in targets if mgr.has_seq(s.seq_id)]
        if held:
            mgr.free_batch(held)
        if g.status is _RUNNING:
            self._num_running_seqs -= len(targets)
        for s in targets:
            s.status = status
            s.finish_reason = reason
            s.unit = None
            del self._seqs[s.seq_id]
        if g.units is not None:
            if g.status is SeqStatus.WAITING:
                g.units = None  # rebuilt from the live sequences at admission
            elif all(s.unit is None for s in g.seqs):
                g.units = None
        if g.num_live:
            return None
        queue = {SeqStatus.WAITING: self.waiting, _RUNNING: self.running,
                 SeqStatus.SWAPPED: self.swapped}[g.status]
        queue.remove(g)
        if status is SeqStatus.FINISHED_ABORTED or status is SeqStatus.FINISHED_IGNORED:
            g.finish_reason = reason
        return self._close(g, now)

    def abort(self, request_id: str, reason: str = "aborted", *,
              now: float | None = None) -> FinishedRequest | None:
        """Abort a request in any state, freeing all its blocks. Returns it, or None when the
        id is unknown or already finished."""
        return self.finish(request_id, None, SeqStatus.FINISHED_ABORTED, reason, now=now)

    def _maybe_defrag(self, out: SchedulerOutput) -> None:
        mgr = self.manager
        frag = mgr.fragmentation()
        if frag.external <= self.config.defrag_threshold:
            return
        moves = min(self.config.defrag_max_moves, frag.num_free - mgr.watermark_blocks)
        if moves < 1:
            return
        plan = mgr.plan_defrag(moves)
        if plan is None:
            return
        self._defrag_plan = plan
        out.defrag_moves = plan.moves
        out.defrag_plan_id = plan.plan_id
        self.defrag_plans += 1

    def defrag_done(self, plan_id: int, ok: bool = True) -> DefragResult | None:
        """The runtime finished (``ok``) or failed the copies of defrag plan ``plan_id``:
        commit the moves still valid (returns the result) or release the destinations."""
        plan = self._defrag_plan
        if plan is None or plan.plan_id != plan_id:
            raise SchedulerError(f"defrag plan {plan_id} is not in flight")
        self._defrag_plan = None
        if not ok:
            self.manager.abort_defrag(plan)
            self.defrag_aborted += 1
            return None
        r = self.manager.commit_defrag(plan)
        self.defrag_moves += len(r.committed)
        self.defrag_retried += len(r.retried)
        return r
