"""kvpool.replay: ``kvpool replay TRACE``, trace replay through the real pool and scheduler.

- ``formats``: the trace file formats (Mooncake, Bailian, Azure, BurstGPT) and detection.
- ``trace``: trace loading into TraceRequests and deterministic token synthesis.
- ``notices``: what the replay says on stderr about a trace it read (wrong block size or
  format, reordered records).
- ``loop``: the one instant-replay loop, and ``simulate`` (a trace through one eviction policy).
- ``instant``: cache-policy replay through the real BlockPool.
- ``timed``: a discrete-event run through the real Scheduler with a step cost model.
- ``report``: the progress bar, percentiles, timelines and the plot.
- ``cli``: the command.

Knows core, sched, config and errors only (tests/test_layering.py).
"""
