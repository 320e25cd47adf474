"""kvpool's concurrency stress harness: ``python -m stress pool|http`` (``kvpool stress``).

Modules::

    cli.py          flags, the exit status (non-zero when a must-be-zero figure is not 0)
    pool_mode.py    PoolStress: threads + coroutines (AsyncManagerFront) on one manager
    pool_worker.py  PoolWorker: one simulated client's random operations (intents)
    pool_shadow.py  ShadowRuntime: manager + fake KV store; content and tenant verification
    http_mode.py    HttpStress: clients against a real server, reference run, drain, verdict
    http_client.py  RequestRunner: one request (JSON / SSE / disconnect / slow) -> Outcome
    workload.py     Workload: the seeded request mix, tenants, greedy probes
    hostile.py      the hostile-input table and the answers it must get
    faults.py       InjectedFaults (a FaultPlan) / FaultDriver: copy and step faults (test only)
    servers.py      SpawnedServer (subprocess) / InProcessServer (thread), loopback only
    metrics.py      /metrics scrapes and the figures read from them
    report.py       StressReport (JSON, PNG, verdict) and the live Progress line

Network traffic goes to 127.0.0.1 only; every run is bounded by time and request count.
"""

__all__ = ["main"]


def main(argv=None) -> int:
    from stress.cli import main as _main

    return _main(argv)
