"""deploy/'s Grafana dashboard as the tests read it: its JSON, every PromQL expression in it,
and an expression with Grafana's template variables replaced (plain PromQL)."""

from __future__ import annotations

import json
import re
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "kvpool.json"

# Grafana's template variables -> values that make a plain PromQL expression
GRAFANA_VARS = {"$__rate_interval": "30s", "$__interval": "15s", "$__range": "5m",
                "${datasource}": "", "$job": ".*", "$instance": ".*", "$router_job": ".*",
                "$epp_job": ".*"}


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_exprs(dash: dict) -> list[str]:
    """Every PromQL expression: panel targets (rows nest panels) and variable queries."""
    out = []
    stack = list(dash["panels"])
    while stack:
        panel = stack.pop()
        stack.extend(panel.get("panels", []))
        out.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q or "")
        if var.get("type") == "query" and m:
            out.append(m.group(1))  # label_values(<selector>, label): the selector is PromQL
    return out


def plain(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unhandled Grafana variable in {expr!r}"
    return expr
