"""``kvpool router``: a KV-aware reverse proxy in front of N ``kvpool serve`` replicas.

scoring.py  the pure decision (longest prefix hit with SGLang's load guard)
replicas.py the replica set and its /health poller
proxy.py    the aiohttp app: lookup fan-out, choice, streaming proxy with retry, /metrics
cli.py      the ``kvpool router`` subcommand
"""
