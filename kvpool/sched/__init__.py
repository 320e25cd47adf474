"""kvpool.sched: sequences, the scheduler, preemption (trace replay: kvpool.replay).

Knows ``kvpool.core`` / ``config`` / ``errors`` and nothing above them (no runtime, server,
aiohttp or torch). The runtime drives it::

    sched = Scheduler(BlockSpaceManager(CacheConfig(...)), SchedulerConfig(...))
    sched.add_request("r1", prompt_ids, params)          # params: any StopParams
    while sched.has_unfinished():
        out = sched.schedule()                           # SchedulerOutput
        sampled = run_step(out)                          # {seq_id: token_id}
        for req in sched.on_step_done(out, sampled):     # FinishedRequest
            ...
"""

from kvpool.sched.admission_gate import exceeds_context
from kvpool.sched.request_checker import RequestChecker
from kvpool.sched.config import CostModel, PreemptionMode, SchedulerConfig
from kvpool.sched.output import (DecodeBatch, FinishedRequest, PreemptedRequest,
                                 ScheduledDecode, ScheduledPrefill, SchedulerOutput,
                                 SchedulerStats, SeqOutput)
from kvpool.sched.scheduler import Scheduler
from kvpool.sched.sequence import RequestParams, SeqStatus, StopParams

__all__ = [
    "CostModel", "DecodeBatch", "FinishedRequest", "PreemptedRequest", "PreemptionMode",
    "RequestChecker", "RequestParams",
    "ScheduledDecode", "ScheduledPrefill", "Scheduler", "SchedulerConfig", "SchedulerOutput",
    "SchedulerStats", "SeqOutput", "SeqStatus", "StopParams", "exceeds_context",
]
