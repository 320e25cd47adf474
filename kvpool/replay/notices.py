"""What ``kvpool replay`` says on stderr about a trace it read: one line per kind of oddity,
with the first record's ``file:line`` and the flag that fixes it (cli.py prints them).

NOTE(format-hints): a wrong ``--trace-block-size`` or ``--trace-format`` still reads, and
only the hit rate and the times are off (the Mooncake trace read with 16-token ids: 0.0013
instead of 0.2627); so every mismatch the reader counts names both flags and what each changes:
the block size is the tokens each hash id stands for, the format the timestamp unit and the
keys. A Mooncake timestamp with a fraction of a millisecond (NOTE(format-clues) in formats.py)
says which format is more likely (docs/benchmarks.md "Trace formats").
"""

from __future__ import annotations

from kvpool.replay.trace import Trace

_UNITS = {"mooncake": "ms", "bailian": "s"}


def _flags(trace: Trace) -> str:
    """The two flags, what each changes, and what they are now."""
    unit = _UNITS.get(trace.format)
    return (f"--trace-block-size sets the tokens each hash id stands for (now {trace.block}), "
            f"--trace-format the timestamp unit and the keys (now {trace.format}"
            + (f", timestamps in {unit})" if unit else ")"))


def _fraction_clue(name: str, trace: Trace) -> str:
    """The fractional-ms clue, as a clause ('' without one)."""
    c = trace.clues
    if not c.fractional_ms:
        return ""
    return (f"; {c.fractional_ms} timestamp(s) have a fraction of a millisecond (first "
            f"{name}:{c.first_fractional_ms}), as Mooncake's whole-ms ones do not: a Bailian "
            "trace with the Mooncake keys? pass --trace-format bailian (seconds, 16-token ids)")


def trace_notices(name: str, trace: Trace) -> list[str]:
    """The lines to say about ``trace`` read from ``name`` (none for a trace read as it is)."""
    out = []
    if trace.reordered:  # NOTE(time-order) in trace.py: replayed sorted, and said so
        out.append(f"{name}:{trace.first_back}: {trace.reordered} record(s) arrive before a "
                   "record above them; replaying in arrival order")
    clue = _fraction_clue(name, trace)
    if trace.trimmed:  # NOTE(excess-ids) in trace.py: both modes replay the same blocks
        out.append(f"{name}:{trace.first_trimmed}: {trace.trimmed} record(s) list more hash_ids "
                   f"than input_length needs in blocks of {trace.block} tokens; the extra ids "
                   f"are ignored (ids of smaller blocks, or another format's file? {_flags(trace)})"
                   + clue)
    if trace.padded:  # NOTE(short-ids) in trace.py
        out.append(f"{name}:{trace.first_padded}: {trace.padded} record(s) list fewer hash_ids "
                   f"than input_length needs in blocks of {trace.block} tokens; their uncovered "
                   "blocks replay as content no other request shares. Unless the trace "
                   f"truncates its ids, the block size or the format is wrong: {_flags(trace)}"
                   + clue)
    if clue and not trace.trimmed and not trace.padded:
        out.append(f"{name}: read as {trace.format} (timestamps in ms){clue}")
    c = trace.clues
    if c.unkeyed:  # NOTE(format-clues) in formats.py: --trace-format bailian on other records
        out.append(f"{name}:{c.first_unkeyed}: {c.unkeyed} record(s) lack a Bailian key "
                   "(chat_id, parent_chat_id, turn); read as bailian anyway (timestamps in s, "
                   f"{trace.block}-token ids): a Mooncake trace? pass --trace-format mooncake "
                   "(timestamps in ms, 512-token ids)")
    return out
