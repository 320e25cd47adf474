"""``--tool-call-parser NAME`` -> the parser that reads that model family's tool calls."""

from __future__ import annotations

from typing import Any

from kvpool.server.tools.hermes import HermesParser
from kvpool.server.tools.llama3_json import Llama3JsonParser
from kvpool.server.tools.mistral import MistralParser
from kvpool.server.tools.pythonic import PythonicParser

__all__ = ["PARSERS", "tool_parser"]

PARSERS = {p.name: p for p in (HermesParser, Llama3JsonParser, MistralParser, PythonicParser)}


def tool_parser(name: str) -> Any:
    """A parser instance; an unknown name is a ValueError listing the known ones."""
    if name not in PARSERS:
        raise ValueError(f"--tool-call-parser {name!r}: use one of {', '.join(sorted(PARSERS))}")
    return PARSERS[name]()
