"""NOTE(enum-fuel): initial lexer fuel granted to a JSON schema's enum and const values on top
of LIMITS', where they need more than LIMITS gives (grammar.py ``GrammarSpec._checked``).

llguidance builds a JSON-schema ``enum`` / ``const`` as one regex lexeme whose initial
construction costs ~11 fuel an entry (~0.1 a character of long strings, up to ~10 a character
of escaped ones: measured, llguidance 1.9.1), so LIMITS' 200,000 refused an enum of ~18,000
strings ("initial lexer configuration (grammar) too big"): 20,000 time zones (603 KiB) or 500
objects of four 10-value enums (280 KiB), which vLLM 0.33 serves on xgrammar (third probe,
P3). LIMITS' fuel is not raised for every grammar: it is what bounds a counted repeat
(NOTE(budget)). Measured on the tiny vocabulary, ``^x{N}$`` is admitted up to N ~33,000 at
200,000 fuel, ~49,000 at 300,000, ~66,000 at 400,000, and ``^x{100000}$`` itself at 600,000
(~5, ~7.6 and ~11 ms a mask while masks forced its run; ~0.01 ms since, NOTE(no-forcing),
grammar_forcing.py). An enum's lexeme costs little a mask: 20,000 strings
~0.01 ms (median; 0.13 ms at most) on the tiny vocabulary and ~0.04 ms (p90 0.2 ms) on
bench/structured.py's 150k one, as a small schema does. So a schema refused for its initial
lexer is tried again with ENUM_FUEL_PER_CHAR fuel for each character of its enum and const
values' compact JSON on top of LIMITS' (over what any measured enum needs), and its probes
(grammar_compile.py) then also build the schema without those values (``without_values``)
under LIMITS alone: each pattern is probed alone under LIMITS as before, so the grant pays
for the enums and every other lexeme costs no more a mask than LIMITS admits. A schema with
MAX_PROBES patterns and definitions or more (not each probed alone) gets no grant. Still
refused: a schema past llguidance's own size bound ("schema too large", ~900 objects of four
10-value enums).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ENUM_FUEL_PER_CHAR", "FUEL_REFUSAL", "value_chars", "without_values"]

# NOTE(enum-fuel): above the most measured (~10 a character of escaped strings, ~8 of control
# characters); a 1 MiB schema gets at most ~12.6M fuel, spent on the parse pool and the
# compile worker, never a step (1 MiB of 3-character strings: ~1 s + ~0.5 s, there)
ENUM_FUEL_PER_CHAR = 12
FUEL_REFUSAL = "initial lexer configuration"  # llguidance's words for an initial fuel refusal
_VALUED = ("enum", "const")


def value_chars(schema: Any) -> int:
    """The characters of every ``enum`` and ``const`` value's compact JSON in ``schema`` (any
    object that has one, a value's own too: only ever more fuel, never less)."""
    total, stack = 0, [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            total += sum(len(json.dumps(node[k], separators=(",", ":"), ensure_ascii=False))
                         for k in _VALUED if k in node)
            stack.extend(v for k, v in node.items() if k not in _VALUED)
    return total


def without_values(node: dict) -> dict:
    """One schema object without its ``enum`` / ``const`` (any value there): the rest of a
    granted schema, probed under LIMITS alone (NOTE(enum-fuel))."""
    if not any(k in node for k in _VALUED):
        return node
    return {k: v for k, v in node.items() if k not in _VALUED}
