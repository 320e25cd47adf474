"""``--tool-call-parser NAME`` -> the parser that reads that model family's tool calls."""

from __future__ import annotations

from kvpool.server.tools.calls import ToolParser
from kvpool.server.tools.deepseek import DeepSeekV3Parser, DeepSeekV31Parser
from kvpool.server.tools.glm45 import Glm45Parser
from kvpool.server.tools.hermes import HermesParser, InternLMParser, LongcatParser
from kvpool.server.tools.json_list import GraniteParser, JambaParser, Phi4MiniJsonParser
from kvpool.server.tools.kimi_k2 import KimiK2Parser
from kvpool.server.tools.llama3_json import Llama3JsonParser
from kvpool.server.tools.minimax_m2 import MiniMaxM2Parser
from kvpool.server.tools.mistral import MistralParser
from kvpool.server.tools.pythonic import PythonicParser
from kvpool.server.tools.qwen3_coder import Qwen3CoderParser, SeedOssParser

__all__ = ["PARSERS", "tool_parser"]

PARSERS: dict[str, type[ToolParser]] = {p.name: p for p in (
    HermesParser, Llama3JsonParser, MistralParser, PythonicParser, Qwen3CoderParser,
    SeedOssParser, Glm45Parser, MiniMaxM2Parser, DeepSeekV3Parser, DeepSeekV31Parser,
    KimiK2Parser, LongcatParser, InternLMParser, GraniteParser, JambaParser,
    Phi4MiniJsonParser)}
PARSERS |= {"qwen3_xml": Qwen3CoderParser, "glm47": Glm45Parser,  # vLLM's other names
            "qwen3_json": HermesParser, "llama4_json": Llama3JsonParser,
            "llama4_pythonic": PythonicParser, "granite4": HermesParser,
            "ernie45": HermesParser, "hunyuan_a13b": JambaParser}


def tool_parser(name: str) -> ToolParser:
    """A parser instance; an unknown name is a ValueError listing the known ones."""
    if name not in PARSERS:
        raise ValueError(f"--tool-call-parser {name!r}: use one of {', '.join(sorted(PARSERS))}")
    return PARSERS[name]()
