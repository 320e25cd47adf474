"""The engine: ``core`` (EngineCore: one step, schedule then forward, sample, deliver) and
``async_engine`` (AsyncEngine: the step thread and the asyncio streams), with what they hand out
(``output_processor``, ``prompt_logprobs``), what they fit before a request runs
(``context_fit``; what they refuse is kvpool.sched's RequestChecker), their ``config`` and the
loop's ``workers``."""
