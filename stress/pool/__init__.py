"""``stress pool``: threads and coroutines (PoolFront) on one BlockSpaceManager.

    mode.py    PoolStress / PoolConfig: the run, the quiescent invariant checks, the verdict
    worker.py  PoolWorker: one simulated client's random operations (intents)
    shadow.py  ShadowRuntime: manager + fake KV store; content and tenant verification
    direct.py  DirectRuntime: the unbatched calls and raw blocks (NOTE(direct))
    races.py   the pool's own races on purpose: ownership ledger, allocators, quiet probe
"""
