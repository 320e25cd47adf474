"""kvpool.runtime: the engine that drives the scheduler and the model over the KV pool.

- ``engine/``: ``EngineCore`` (one synchronous step) and ``AsyncEngine`` (its asyncio face and
  step thread), their config, outputs and up-front request checks.
- ``kv/``: the device and host KV tensors and the copy engine that moves blocks between them.
- ``remote/``: the engine's read and write path to the shared prefix tier (``kvpool.remote``).
- ``model/``: the paged Llama-family model, sampling, grammars, tokenizers.
- ``ema``, ``faults``, ``ops``: rate averages, injected faults and the step thread's inbox
  messages, shared by the three above.
"""
