"""Function calling in vLLM's shape: ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` on
chat completions, ``message.tool_calls`` and streamed tool-call deltas in the response.

::

    request.py      the fields -> a ToolRequest (400s name the param), the forcing grammar
    forced.py       required / named: the grammar-forced output -> calls, as it streams
    stream.py       one choice's text -> content and tool-call deltas (auto: a parser)
    tool_text.py    the text from a call marker on, and when a call may have closed
    hermes.py, llama3_json.py, mistral.py, pythonic.py, qwen3_coder.py, glm45.py,
    minimax_m2.py, deepseek.py, kimi_k2.py               one model family's output format each
    typed.py        the XML formats' text values, typed by the tool's schema; TypedParser
    parsers.py      ``--tool-call-parser NAME`` -> the parser
    calls.py        ToolCall, the ids, the shapes the response carries, ToolParser
    scan.py         the bracket scanner the parsers share

``tool_choice``: ``none`` (the template still sees the tools; the output is plain content),
``auto`` (the model decides; ``--enable-auto-tool-choice --tool-call-parser NAME`` reads its
output), ``required`` and a named function (``{"type": "function", "function": {"name"}}``),
both enforced by the structured-output grammar, so even a random-weight model returns a call
whose arguments validate against the tool's ``parameters`` schema.
"""
