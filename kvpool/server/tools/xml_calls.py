"""The scanner the XML call formats share (qwen3_coder, seed_oss, minimax_m2), in time linear in
the output's length.

A call is ``OPEN HEADER> BODY CLOSE`` (``<function=get_weather>...</function>``, ``<invoke
name="get_weather">...</invoke>``), its parameters ``POPEN HEADER> VALUE`` ending at
``PCLOSE``, at the next ``POPEN`` or at the end of the body. A header ends at the first ``>``
within HEADER_MAX characters (a name is at most 64); an opener with none is no tag.

Why not regular expressions: ``<function=([^>]*)>(.*?)</function>`` tries every opener
against the rest of the text, so an output that repeats ``<function=`` without closing it (a
small model looping) took seconds to read at 60 000 characters, and the stream reads the text
again at each piece that may close a call, on the event loop. Here every search starts where
the last one ended or reuses its answer: each character is looked at a bounded number of
times.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["HEADER_MAX", "blocks", "params"]

HEADER_MAX = 256


def _header(text: str, start: int, end: int) -> int:
    """Where the header that begins at ``start`` ends (its ``>``), or -1: none before ``end``
    or within HEADER_MAX characters."""
    return text.find(">", start, min(end, start + HEADER_MAX))


def blocks(text: str, start: int, tags: tuple[str, str]) -> Iterator[tuple[str, str, int]]:
    """(header, body, end) of each complete ``OPEN HEADER> BODY CLOSE`` from ``start``, in
    order (``tags`` = (OPEN, CLOSE); ``end``: just past its CLOSE); an opener whose block
    does not close ends the reading."""
    opener, closer = tags
    pos = text.find(opener, start)
    close = -1
    while pos >= 0:
        if close < pos:
            close = text.find(closer, pos)
            if close < 0:
                return
        head = _header(text, pos + len(opener), close)
        if head < 0:
            pos = text.find(opener, pos + len(opener))
            continue
        yield text[pos + len(opener):head], text[head + 1:close], close + len(closer)
        pos = text.find(opener, close + len(closer))


def params(body: str, tags: tuple[str, str]) -> Iterator[tuple[str, str]]:
    """(header, value) of each parameter of a call's ``body`` (``tags`` = (POPEN, PCLOSE)), in
    order; a value runs to PCLOSE, the next POPEN or the body's end."""
    opener, closer = tags
    pos = body.find(opener)
    close = -1
    while pos >= 0:
        head = _header(body, pos + len(opener), len(body))
        nxt = body.find(opener, pos + len(opener) if head < 0 else head)
        if head >= 0:
            if close != len(body) and close < head:
                close = body.find(closer, head)
                close = len(body) if close < 0 else close
            end = min(close, nxt if nxt >= 0 else len(body))
            yield body[pos + len(opener):head], body[head + 1:end]
        pos = nxt
