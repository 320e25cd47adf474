"""``kvpool router``: a KV-aware reverse proxy in front of N ``kvpool serve`` replicas.

scoring.py  the pure decision (longest prefix hit with SGLang's load guard)
replicas.py the replica set and its per-replica /health heartbeat (liveness)
relayed.py  what of a request crosses: end-to-end headers each way, the body bounded, checked
upstream.py one attempt at one replica: JSON answers whole, SSE relayed, failures classified
proxy.py    the aiohttp app: lookup fan-out, choice, retry over replicas, /metrics
kv_routing.py  ``--kv-events``: prefix hits from the replicas' KV event streams, no lookups
kv_feed.py  one replica's event stream (SUB + replay) kept in a kv_index.BlockIndex
kv_prompt.py   a body's prefix-hash keys computed in the router (the replicas' hash spec)
cli.py      the ``kvpool router`` subcommand (the replica's guarded listener)
"""
