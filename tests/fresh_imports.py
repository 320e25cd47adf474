"""What a fresh interpreter has loaded after some imports: the start-up tests' one probe
(tests/router/test_router_imports.py, tests/runtime/test_startup_imports.py)."""

from __future__ import annotations

import subprocess
import sys


def loaded_of(imports: str, names: tuple[str, ...]) -> list[str]:
    """Which of the modules ``names`` a new interpreter holds after ``import <imports>``."""
    code = (f"import sys, {imports}\n"
            f"print(','.join(m for m in {names!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    return [m for m in out.stdout.strip().split(",") if m]
