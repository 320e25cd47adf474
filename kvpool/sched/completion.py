"""Step completion: accepting sampled tokens, stop conditions, finishing and aborting.

``StepCompletion`` works on the ``SchedulerState`` it is handed. The runtime's side of one
step::

    out = sched.schedule()
    ... copies, forward, sampling, defrag copies (order in kvpool.sched.output) ...
    finished = sched.on_step_done(out, {seq_id: token_id, ...}, stops={seq_id: reason})

``sampled`` must hold a token for every sequence of ``out.decodes`` and of every prefill chunk
with ``is_last``, except sequences aborted or finished while the step ran (those tokens are
dropped) and those in ``deferred``: the runtime computed their KV but samples them later (a
late grammar mask). Such a sequence is ``awaiting``: no step schedules it until
``accept_late`` (between steps) brings its token, which is then judged like any other.
A sequence finishes on a stop token (eos unless ignore_eos: FINISHED_STOPPED), after
``max_tokens`` outputs or at ``max_model_len`` tokens (FINISHED_LENGTH), when the runtime
names it in ``stops`` (a stop string matched the text this token completed: FINISHED_STOPPED
with that reason, before any other check), or when the runtime calls ``finish`` / ``abort``.
Its blocks are freed at once; the sequences each ``on_step_done`` / ``accept_late`` finished
are reported in ``ended`` (NOTE(child-finish)), the request is returned when its last
sequence finished. ``on_step_done`` also says every copy of the step
completed: abort a request whose copy failed first, or its swapped-in blocks would be hashed.
A runtime whose swap-out copies run on past the step passes ``swap_outs_done=False`` and
confirms each one through ``swap_out_done`` once it completed (never one that failed): only
then are its host blocks published (core/swap.py NOTE(swap-out-confirm)).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from kvpool.core import BlockSpaceManager
from kvpool.errors import SchedulerError
from kvpool.sched.output import FinishedRequest, ScheduledPrefill, SchedulerOutput, SeqOutput
from kvpool.sched.sequence import PrefillUnit, Sequence, SeqStatus, SequenceGroup
from kvpool.sched.state import DefragDriver, SchedulerState

_RUNNING = SeqStatus.RUNNING
_FINAL = (SeqStatus.FINISHED_ABORTED, SeqStatus.FINISHED_IGNORED)  # override a group's status


class StepCompletion:
    """Applies finished steps to ``state`` (tokens, stops, frees), finishes and aborts
    requests, and settles each step's defrag plan through ``defrag``."""

    def __init__(self, state: SchedulerState, manager: BlockSpaceManager,
                 defrag: DefragDriver) -> None:
        self.state = state
        self.manager = manager
        self.defrag = defrag
        # NOTE(child-finish): the report of the last on_step_done / accept_late, the
        # sequences it finished, in the order judged; the runtime's final output of each
        # takes its reason from here (kvpool/runtime/engine/output_processor.py)
        self.ended: list[SeqOutput] = []

    def on_step_done(self, output: SchedulerOutput, sampled: Mapping[int, int], *,
                     now: float | None = None, defrag_ok: bool = True,
                     stops: Mapping[int, str] | None = None,
                     deferred: Collection[int] = (),
                     swap_outs_done: bool = True) -> list[FinishedRequest]:
        """Apply a completed step: record the computed KV (prefix cache), append the sampled
        tokens, check stop conditions (``stops``: seq_id -> the runtime's stop reason, e.g. a
        matched stop string), free finished sequences, and commit the step's defrag
        plan (or abort it when ``defrag_ok`` is false) unless ``defrag_done`` already did.
        ``deferred`` sequences get no token now: they await ``accept_late``. The step's
        swap-outs are confirmed unless ``swap_outs_done`` is false (see the module).
        Returns the requests that finished in this step; ``ended`` reports its sequences."""
        self.ended = []
        st = self.state
        if output is not st.inflight:
            if not output.has_work:
                return []
            raise SchedulerError(f"step {output.step_id} is not the step in flight")
        self._check_sampled(output, sampled, deferred)
        st.inflight = None
        now = st.clock() if now is None else now
        done: list[Sequence] = []
        stops = stops or {}
        for p in output.prefills:
            self._apply_prefill(p, sampled, now, done, stops, deferred)
        self._confirm_swap_ins(output)
        if swap_outs_done and output.copies:
            for c in output.copies:
                if c.kind == "swap_out":
                    self.swap_out_done(c.request_id, output.step_id)
        self._accept_decodes(output, sampled, now, done, stops, deferred)
        finished = self._retire(done, now)
        self.defrag.settle(output, defrag_ok)
        return finished

    def _check_sampled(self, output: SchedulerOutput, sampled: Mapping[int, int],
                       deferred: Collection[int]) -> None:
        """Every running sequence the step samples for has its token in ``sampled``, or
        is ``deferred``."""
        has = sampled.__contains__
        if all(map(has, output.decodes.seq_ids)) and all(
                has(i) for p in output.prefills if p.is_last for i in p.seq_ids):
            return  # NOTE(speed): the common case, the decodes checked without a Python loop
        seqs = self.state.seqs
        want = [i for p in output.prefills if p.is_last for i in p.seq_ids]
        want += output.decodes.seq_ids
        missing = [i for i in want if i not in sampled]  # NOTE(speed): usually none
        missing = [i for i in missing if i not in deferred and i in seqs
                   and seqs[i].status is _RUNNING]
        if missing:
            raise SchedulerError(f"no sampled token for running sequences {missing[:8]}: "
                                 "abort their requests before on_step_done if they failed")

    def _unit_of(self, p: ScheduledPrefill) -> PrefillUnit | None:
        """The prefill unit ``p`` computed, None when all its sequences left meanwhile."""
        seqs = self.state.seqs
        for i in p.seq_ids:
            s = seqs.get(i)
            if s is not None and s.unit is not None:
                return s.unit
        return None

    def _apply_prefill(self, p: ScheduledPrefill, sampled: Mapping[int, int], now: float,
                       done: list[Sequence], stops: Mapping[int, str],
                       deferred: Collection[int]) -> None:
        """Record chunk ``p``'s KV; on its last chunk the unit's sequences start decoding."""
        unit = self._unit_of(p)
        if unit is None:
            return  # every sequence of it finished or was aborted meanwhile
        unit.computed = p.end
        live = [s for s in unit.seqs if s.status is _RUNNING]
        for s in live:
            self.manager.mark_computed(s.seq_id, p.end)
        if p.end != unit.num_tokens:
            return
        g = live[0].group
        for s in live:
            s.unit = None
            if s.seq_id in deferred:
                s.awaiting = True
                continue
            self.state.counters.generation_tokens += 1
            self._accept(s, sampled[s.seq_id], now, done, stops.get(s.seq_id))
        if all(s.unit is None for s in g.seqs):
            g.units = None

    def _confirm_swap_ins(self, output: SchedulerOutput) -> None:
        """NOTE(copy-pending): the step ran, so its swap-in copies completed (a request whose
        copy failed was aborted before this call): only now may those blocks carry prefix
        hashes."""
        seqs, mgr = self.state.seqs, self.manager
        for i in output.swapped_in:
            s = seqs.get(i)
            if s is not None and s.status is _RUNNING and mgr.has_seq(i):
                mgr.mark_computed(i)

    def swap_out_done(self, request_id: str, step_id: int) -> None:
        """NOTE(swap-out-confirm): the swap-out copy step ``step_id`` planned for
        ``request_id`` completed: its host blocks are published now. Ignored when the request
        left, came back or was swapped out again since (that copy is not this one)."""
        g = self.state.groups.get(request_id)
        if g is None or g.swap_out_step != step_id or g.status is not SeqStatus.SWAPPED:
            return
        g.swap_out_step = None
        self.manager.swap.confirm_out([s.seq_id for s in g.live_seqs])

    def _accept_decodes(self, output: SchedulerOutput, sampled: Mapping[int, int],
                        now: float, done: list[Sequence], stops: Mapping[int, str],
                        deferred: Collection[int]) -> None:
        """NOTE(speed): ``_accept`` inlined for the common token (no stop, below the
        sequence's ``judge_at``); any other goes through ``_judge``. The step's sequences are
        those the planner listed (``state.decode_seqs``), not looked up by id; one that
        finished meanwhile is no longer RUNNING."""
        st = self.state
        seqs = st.decode_seqs
        if len(seqs) != len(output.decodes):  # not the list of this output: look them up
            seqs = list(map(st.seqs.get, output.decodes.seq_ids))
        n = 0
        for s in seqs:
            if s is None or s.status is not _RUNNING:
                continue
            i = s.seq_id
            if deferred and i in deferred:
                s.awaiting = True
                continue
            tok = sampled[i]
            toks = s.output_token_ids
            toks.append(tok)
            n += 1
            if stops or len(toks) >= s.judge_at or tok in s.stop_ids:
                self._judge(s, tok, now, done, stops.get(i))
        st.counters.generation_tokens += n

    def accept_late(self, sampled: Mapping[int, int], stops: Mapping[int, str] | None = None,
                    now: float | None = None) -> list[FinishedRequest]:
        """Between steps: the deferred tokens of running, ``awaiting`` sequences (any other id
        is ignored), judged like a step's; returns the requests that finished (``ended``: the
        sequences)."""
        self.ended = []
        st = self.state
        if st.inflight is not None:
            raise SchedulerError("accept_late between steps: a step is in flight")
        now = st.clock() if now is None else now
        done: list[Sequence] = []
        stops = stops or {}
        for i, tok in sampled.items():
            s = st.seqs.get(i)
            if s is None or not s.awaiting or s.status is not _RUNNING:
                continue
            s.awaiting = False
            st.counters.generation_tokens += 1
            self._accept(s, tok, now, done, stops.get(i))
        return self._retire(done, now)

    def on_step_failed(self, output: SchedulerOutput, reason: str = "step failed",
                       now: float | None = None) -> list[FinishedRequest]:
        """The step could not run: abort every request in it (their tables reserved slots
        that were never written), those its copies were for, and the defrag plan. Returns
        the aborted requests.

        A request the step swapped out is SWAPPED over host blocks its copy never wrote: it
        is aborted too, as the engine aborts one whose swap-out copy failed (a copy batch
        fails its request alone, CopyBatch); it is never confirmed (NOTE(swap-out-confirm)),
        so aborting it frees those host blocks unpublished."""
        st = self.state
        if output is not st.inflight:
            raise SchedulerError(f"step {output.step_id} is not the step in flight")
        st.inflight = None
        self.defrag.settle(output, False)
        rids = dict.fromkeys([p.request_id for p in output.prefills]
                             + output.decodes.request_ids
                             + [c.request_id for c in output.copies])
        out = []
        for rid in rids:
            r = self.finish(rid, None, SeqStatus.FINISHED_ABORTED, reason, now=now)
            if r is not None:
                out.append(r)
        return out
    def _accept(self, s: Sequence, token: int, now: float, done: list[Sequence],
                stop: str | None = None) -> None:
        s.output_token_ids.append(token)
        self._judge(s, token, now, done, stop)

    def _judge(self, s: Sequence, token: int, now: float, done: list[Sequence],
               stop: str | None) -> None:
        """After ``token`` was appended: stamp the first token's time and finish ``s`` (into
        ``done``) on a stop, a stop token or a length limit; else note when ``s`` must be
        judged next (``judge_at``, ``stop_ids``)."""
        toks = s.output_token_ids
        g = s.group
        if g.first_token_time is None:
            g.first_token_time = now
        lim = g.limits
        room = self.state.config.max_model_len - g.prompt_len  # outputs that fit the model
        if stop is not None:
            s.status = SeqStatus.FINISHED_STOPPED
            s.finish_reason = stop
        elif token in lim.stop_ids:
            s.status = SeqStatus.FINISHED_STOPPED
            s.finish_reason = "eos" if token == lim.eos_token_id else f"stop_token {token}"
        elif len(toks) >= lim.max_tokens:
            s.status = SeqStatus.FINISHED_LENGTH
            s.finish_reason = "max_tokens"
        elif len(toks) >= room:
            s.status = SeqStatus.FINISHED_LENGTH
            s.finish_reason = "max_model_len"
        else:
            s.judge_at = min(lim.max_tokens, room)
            s.stop_ids = lim.stop_ids
            return
        done.append(s)

    def _retire(self, done: list[Sequence], now: float) -> list[FinishedRequest]:
        """Free the sequences that just finished, reported in ``ended`` (their token lists
        are final: shared, not copied); return the requests left with none live."""
        if not done:
            return []
        self.ended = [SeqOutput(s.seq_id, s.output_token_ids, s.status, s.finish_reason)
                      for s in done]
        st = self.state
        self.manager.free(*(s.seq_id for s in done))
        st.num_running_seqs -= len(done)
        finished = []
        for s in done:
            s.unit = None
            del st.seqs[s.seq_id]
            g = s.group
            if g.request_id in st.groups and g.num_live == 0:
                st.running.remove(g)
                finished.append(self._close(g, now))
        return finished

    def _close(self, g: SequenceGroup, now: float | None) -> FinishedRequest:
        """Unregister finished group ``g`` (already out of its queue) and report it."""
        st = self.state
        del st.groups[g.request_id]
        g.finished_time = st.clock() if now is None else now
        status = g.seqs[0].status
        for s in g.seqs:
            if s.status in _FINAL:
                status = s.status
        g.status = status
        c = st.counters
        if status is SeqStatus.FINISHED_ABORTED:
            c.num_aborted += 1
        elif status is SeqStatus.FINISHED_IGNORED:
            c.num_ignored += 1
        else:
            c.num_finished += 1
        fin = FinishedRequest(
            g.request_id, status, g.finish_reason or g.seqs[0].finish_reason,
            tuple(SeqOutput(s.seq_id, list(s.output_token_ids), s.status, s.finish_reason)
                  for s in g.seqs),
            len(g.prompt_token_ids), g.num_cached_tokens or 0, g.arrival_time,
            g.first_scheduled_time, g.first_token_time, g.finished_time, g.num_preemptions,
            g.params)
        # NOTE(gc): the group and its sequences point at each other; cut that cycle so that
        # reference counting frees a finished request at once, not the cyclic collector
        # (which otherwise walks every finished request's lists in a pause mid-step)
        g.seqs = []
        g.units = None  # its units list the sequences too (an ignored or aborted prefill)
        return fin

    def ignore(self, g: SequenceGroup, out: SchedulerOutput, reason: str) -> None:
        """Reject ``g`` (already out of its queue) as never servable."""
        held = [s.seq_id for s in g.live_seqs if self.manager.has_seq(s.seq_id)]
        if held:
            self.manager.free(*held)
        for s in g.live_seqs:
            s.status = SeqStatus.FINISHED_IGNORED
            s.finish_reason = reason
            s.unit = None
            self.state.seqs.pop(s.seq_id, None)
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
        g = self.state.groups.get(request_id)
        if g is None:
            return None
        targets = [s for s in g.live_seqs if seq_id is None or s.seq_id == seq_id]
        if not targets:
            return None
        self._end_seqs(g, targets, status, reason)
        if g.num_live:
            return None
        self.state.queue_of(g.status).remove(g)
        if status in _FINAL:
            g.finish_reason = reason
        return self._close(g, now)

    def _end_seqs(self, g: SequenceGroup, targets: list[Sequence], status: SeqStatus,
                  reason: str | None) -> None:
        """Give live ``targets`` of ``g`` their final ``status``, freeing their blocks."""
        st, mgr = self.state, self.manager
        held = [s.seq_id for s in targets if mgr.has_seq(s.seq_id)]
        if held:
            mgr.free(*held)
        if g.status is _RUNNING:
            st.num_running_seqs -= len(targets)
        for s in targets:
            s.status = status
            s.finish_reason = reason
            s.unit = None
            del st.seqs[s.seq_id]
        if g.units is not None:
            if g.status is SeqStatus.WAITING:
                g.units = None  # rebuilt from the live sequences at admission
            elif all(s.unit is None for s in g.seqs):
                g.units = None
