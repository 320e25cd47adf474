"""NOTE(untracked-entries) in logprob_format.py: a chat logprob entry leaves the garbage
collector's lists after a few collections, so a full collection no longer walks every entry
of every big answer being built (8 answers of ~33 MB held /health ~2 s per full collection);
its JSON is the lists' JSON, byte for byte."""

from __future__ import annotations

import gc
import json
import random

from kvpool.runtime.model import TokenLogprob
from kvpool.runtime.model.tiny import build_tiny_model
from kvpool.server.logprob_format import LogprobFormatter


def _entries() -> list:
    rnd = random.Random(0)
    fmt = LogprobFormatter(build_tiny_model(0)[2])
    lps = [TokenLogprob(rnd.randrange(4, 260), -rnd.random(), 1,
                        tuple((rnd.randrange(4, 260), -rnd.random()) for _ in range(20)))
           for _ in range(50)]
    return fmt.chat(lps)


def _as_lists(entry: dict) -> dict:
    return {**entry, "bytes": list(entry["bytes"]),
            "top_logprobs": [{**t, "bytes": list(t["bytes"])} for t in entry["top_logprobs"]]}


def test_chat_entries_leave_the_collectors_lists():
    """Of an entry's 43 containers (top_logprobs 20) only the entry and its top_logprobs list
    stay tracked (before: every one, a list always is)."""
    content = _entries()
    for _ in range(2):  # tuples of ints leave at any collection, then dicts (full ones)
        gc.collect()
    parts = [p for e in content for p in (e, e["bytes"], e["top_logprobs"],
                                           *e["top_logprobs"],
                                           *(t["bytes"] for t in e["top_logprobs"]))]
    assert len(parts) == 50 * 43
    tracked = [p for p in parts if gc.is_tracked(p)]
    assert len(tracked) == 50 * 2
    assert all(t is e or t is e["top_logprobs"] for t, e in zip(tracked[::2], content))


def test_chat_entries_json_is_the_lists_json():
    content = _entries()
    assert json.dumps({"content": content}) == \
        json.dumps({"content": [_as_lists(e) for e in content]})
    assert json.loads(json.dumps(content))[0]["bytes"] == list(content[0]["token"].encode())
