"""``kvpool router`` and ``kvpool epp`` start without torch or the engine: they proxy, score and
pick, and load a tokenizer (and with it torch) only when ``--kv-events`` meets a text prompt,
off the event loop (kv_prompt.py ``load_parser``). A router pod then starts in half a second
and ~60 MB instead of two seconds and ~260 MB."""

from __future__ import annotations

import subprocess
import sys


def test_the_router_and_picker_clis_import_no_torch():
    code = ("import sys, kvpool.router.cli, kvpool.epp.cli\n"
            "heavy = [m for m in ('torch', 'kvpool.runtime', 'kvpool.server.handlers')"
            " if m in sys.modules]\n"
            "print(','.join(heavy) or 'none')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "none", out.stdout
