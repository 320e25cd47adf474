"""NOTE(no-forcing): every matcher is built with llguidance's ``no_forcing`` option; a probe
reads the forced run where forcing would (grammar_compile.py ``_probe``).

Where a grammar allows exactly one next byte, llguidance's mask "forces" it: every mask runs
the whole rest of that forced run through the lexer again and tokenizes it, and allows only the
run's first canonical token. That costs a mask time in the run's length, counted by no fuel: a
JSON schema whose ``const`` is one 100,000-character string (admitted under LIMITS) cost ~35-45
ms a mask on the tiny vocabulary and ~40 ms on bench/structured.py's 150k one, every step until
the run ended, on the step thread every request shares; so did a 100,000-character plain
``pattern`` (~25 ms), a 30,000-character const (~3-7 ms), and runs that short literals compose:
20 required properties of 5,000-character consts, or an array of 1,000 100-character consts
(``minItems``), ~100-120 ms a mask from a 200-byte schema (measured, llguidance 1.9.1). No
bound on one literal's length closes that. Without forcing a mask is a walk of the token trie
from the lexer's state, bounded by LIMITS' step fuel like any other: ~0.002-0.03 ms a mask in
all of those, and the model picks its own tokenization of a forced run among the tokens that
continue it. vLLM 0.33 serves these schemas on xgrammar (0.2.8), which forces nothing either:
the 100,000-character const at ~0.002 ms a mask (after a ~4-7 s compile).

Forcing's work is what refused a counted repeat (``^x{100000}$``, ``^(abc){1000000000}$``,
NOTE(budget)): reading a forced run builds its lexer states under the step fuel, so such a
grammar exhausted it within its first probe. So each probe's first walk still reads the forced
run (``compute_ff_bytes``) before each mask, as forcing did: the same grammars are refused with
the same errors (an array of 10,000 consts: "Too many items"), and the states of a run the
probes reach are built on the compile worker. The masks' own lexer states are built as
generation reaches them, on the step thread, each under the step fuel, and shared by the
matcher's copies and the compile cache: the first sequence whose grammar passes ~14,000 and
~29,000 states pays once for the state table's growth, ~17 and ~37 ms (``^x{33000}$``, tiny
vocabulary), where forcing cost it ~5-14 ms every mask.

NOTE(literal-bound): without forcing, generation builds one lexer state for each byte of a
literal it goes through that no probe read, and LIMITS' ``max_lexer_states`` (50,000, ~0.3 KiB
each) bounds a matcher's memory: a 100,000-character const after a free string failed ~46,000
tokens in ("too many states"). So a JSON schema's ``const`` or ``enum`` value whose compact
JSON is over MAX_LITERAL_BYTES bytes (UTF-8), or a ``pattern`` (a ``patternProperties`` key)
over that many, is a 400 naming the field and the bound, before any work: a literal within it
is served wherever it sits. Realistic consts and enums are a few KB (an enum of 20,000 time
zones is 20-30 bytes a value). vLLM serves the longer const (xgrammar), at a lexer state a byte
here. A run composed of shorter literals past the states where no probe reaches it (20
5,000-character consts in a row after a free string) still ends its request midway
(NOTE(grammar-error)), its masks as cheap as any other's.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_LITERAL_BYTES", "long_literal", "unforced"]

# NOTE(literal-bound): a const / enum value's compact JSON, or a pattern, in UTF-8 bytes
MAX_LITERAL_BYTES = 32 * 1024
_NO_FORCING = '%llguidance {"no_forcing": true}\n'  # Lark's declaration of the option


def unforced(grammar: str) -> str:
    """``grammar`` (llguidance's grammar JSON, or Lark text as llguidance tells them apart: by
    a leading ``{``) with ``no_forcing`` set (NOTE(no-forcing)): a JSON-schema grammar becomes
    the Lark ``%json`` of the same schema, its options (``x-guidance``) in it."""
    if not grammar.lstrip().startswith("{"):
        return _NO_FORCING + grammar
    top = json.loads(grammar)
    for g in top.get("grammars", ()):
        if g.get("json_schema") is not None:
            g["lark_grammar"] = f"start: %json {json.dumps(g['json_schema'])}\n"
            g["json_schema"] = None
        if g.get("lark_grammar") is not None:
            g["lark_grammar"] = _NO_FORCING + g["lark_grammar"]
    return json.dumps(top)


def long_literal(schema: Any, text: str) -> str | None:
    """Why the JSON schema ``schema`` (its compact JSON ``text``) holds a literal over
    MAX_LITERAL_BYTES (NOTE(literal-bound)), else None. A literal is never longer than the
    ASCII-escaped ``text``, so a shorter schema is not walked."""
    if len(text) <= MAX_LITERAL_BYTES:
        return None
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        values = [("const", node["const"])] if "const" in node else []
        if isinstance(node.get("enum"), list):
            values += [("enum", v) for v in node["enum"]]
        for key, value in values:
            size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
            if size > MAX_LITERAL_BYTES:
                return (f"a JSON schema {key} value is {size} bytes of JSON; at most "
                        f"{MAX_LITERAL_BYTES}")
        if (why := _long_pattern(node)) is not None:
            return why
        stack.extend(v for k, v in node.items() if k not in ("const", "enum"))
    return None


def _long_pattern(node: dict) -> str | None:
    """A ``pattern`` or ``patternProperties`` key of ``node`` over MAX_LITERAL_BYTES."""
    props = node.get("patternProperties")
    patterns = [node.get("pattern"), *(props if isinstance(props, dict) else ())]
    for p in patterns:
        if isinstance(p, str) and len(p.encode()) > MAX_LITERAL_BYTES:
            return f"a JSON schema pattern is {len(p.encode())} bytes; at most {MAX_LITERAL_BYTES}"
    return None
