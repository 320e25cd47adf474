"""The engine: ``core`` (EngineCore: one step, schedule then forward, sample, deliver) and
``async_engine`` (AsyncEngine: the step thread and the asyncio streams), with what they hand out
(``outputs``, ``output_processor``, ``prompt_logprobs``), what they refuse before a request
runs (``request_check``, ``context_fit``), their ``config`` and the loop's ``workers``."""
