"""``stress http``: clients against a real ``kvpool serve`` on 127.0.0.1 (loopback only).

    mode.py          HttpStress / HttpConfig (a WorkloadConfig nested): phases and verdict
    client.py        RequestRunner: one request (JSON / SSE / disconnect / slow) -> Outcome
    workload.py      Workload / WorkloadConfig: the seeded request mix, tenants, greedy probes
    hostile.py       the hostile-input table and the answers it must get
    metrics.py       /metrics scrapes and the figures read from them
    servers.py       SpawnedServer (subprocess) / InProcessServer (thread)
    edge.py          the connection-edge table (raw sockets: resets, over-cap, SIGTERM)
    slowloris.py     connections that trickle a request head
    slow_reader.py   streams that are never read
    big_prompt.py    4 MB / 2M-id prompts that must get 400 context_length_exceeded
    health_probe.py  /health sampled all run long
"""
