"""kvpool: a paged KV-cache block manager for LLM inference.

Layers (imports point down only)::

    config / errors  <-  core  <-  sched  <-  runtime  <-  server
                                  metrics reads the plain stats dataclasses
"""

__version__ = "0.1.0"
