"""kvpool's concurrency stress harness: ``python -m stress pool|http`` (``kvpool stress``).

Packages and the modules both modes share::

    cli.py     flags, the exit status (non-zero when a must-be-zero figure is not 0)
    report.py  StressReport (JSON, PNG, verdict) and the live Progress line
    faults.py  InjectedFaults (a FaultPlan) / FaultDriver: copy and step faults (test only;
               the http mode's --faults and the runtime tests use it)
    pool/      PoolStress: threads + coroutines on one manager (see stress/pool/__init__.py)
    http/      HttpStress: clients against a real server (see stress/http/__init__.py)

Network traffic goes to 127.0.0.1 only; every run is bounded by time and request count.
"""

__all__ = ["main"]


def main(argv=None) -> int:
    from stress.cli import main as _main

    return _main(argv)
