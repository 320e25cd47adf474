"""The model-name rewrite and traffic split of the Inference Extension's InferenceModelRewrite
(``--model-rewrites FILE``; docs/epp.md, "Model rewrite and traffic splitting").

NOTE(model-rewrite): the file holds the API's rules, as an ``InferenceModelRewrite`` manifest
(its ``spec.rules``) or the bare ``{"rules": [...]}`` (YAML or JSON; ``poolRef`` is not read,
the picker serving one pool)::

    rules:
    - matches: [{model: {type: Exact, value: food-review}}]
      targets:
      - {modelRewrite: food-review-v1, weight: 10}
      - {modelRewrite: food-review-v2, weight: 90}

A rule whose ``matches`` is empty or absent matches every model; an exact match wins over it,
and among equals the first rule in the file. A target's share is its weight over its rule's
sum; weights are set on every target of a rule or on none (an equal split). Unlike the API's
minimum of 1 a weight may be 0 (a target held out of a rollout), as long as one is not.
The draw is a hash of the request's ``x-request-id`` (Envoy sets one on every request), so a
request id always meets the same target; a request without one draws at random.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["MAX_WEIGHT", "ModelRewrites", "Target", "load_rewrites", "parse_rewrites",
           "request_seed"]

MAX_WEIGHT = 1_000_000  # the API's maximum weight
_RULE_KEYS = {"matches", "targets"}
_TARGET_KEYS = {"modelRewrite", "weight"}
_draw = random.Random()


class Target(NamedTuple):
    model: str
    weight: int


def request_seed(headers: Sequence[tuple[str, str]]) -> str | None:
    """The request's ``x-request-id`` (the draw's seed), None without one."""
    return next((v for k, v in headers if k.lower() == "x-request-id" and v), None)


def _choose(targets: tuple[Target, ...], seed: str | None) -> str:
    total = sum(t.weight for t in targets)
    if seed is None:
        point = _draw.randrange(total)
    else:
        digest = hashlib.blake2b(seed.encode("utf-8", "replace"), digest_size=8).digest()
        point = int.from_bytes(digest, "big") % total
    for t in targets:
        if point < t.weight:
            return t.model
        point -= t.weight
    raise AssertionError("unreachable: the point is below the total")


class ModelRewrites:
    """Exact matches by model name, and the first generic rule (or none)."""

    def __init__(self, exact: dict[str, tuple[Target, ...]],
                 generic: tuple[Target, ...] | None = None) -> None:
        self.exact = exact
        self.generic = generic

    def target(self, model: str, seed: str | None) -> str | None:
        """The model a request for ``model`` goes to (None: no rule matches it)."""
        targets = self.exact.get(model, self.generic)
        return None if targets is None else _choose(targets, seed)


def _fail(where: str, what: str) -> ValueError:
    return ValueError(f"{where}: {what}")


def _mapping(value: Any, where: str, keys: set[str]) -> dict:
    if not isinstance(value, dict):
        raise _fail(where, f"must be a mapping, not {type(value).__name__}")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise _fail(where, f"unknown key(s) {', '.join(map(str, unknown))} (allowed: "
                           f"{', '.join(sorted(keys))})")
    return value


def _targets(value: Any, where: str) -> tuple[Target, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(where, "targets must be a non-empty list")
    out, weighted = [], set()
    for j, t in enumerate(value):
        at = f"{where}.targets[{j}]"
        t = _mapping(t, at, _TARGET_KEYS)
        model = t.get("modelRewrite")
        if not isinstance(model, str) or not model:
            raise _fail(at, "modelRewrite must be a non-empty string")
        weight = t.get("weight", 1)
        weighted.add("weight" in t)
        if isinstance(weight, bool) or not isinstance(weight, int) or \
                not 0 <= weight <= MAX_WEIGHT:
            raise _fail(at, f"weight must be an integer from 0 to {MAX_WEIGHT}")
        out.append(Target(model, weight))
    if len(weighted) > 1:
        raise _fail(where, "set weight on every target or on none")
    if not sum(t.weight for t in out):
        raise _fail(where, "the weights are all 0: no target can be chosen")
    return tuple(out)


def _matches(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(where, "matches must be a list")
    names = []
    for j, m in enumerate(value):
        at = f"{where}.matches[{j}]"
        model = _mapping(_mapping(m, at, {"model"}).get("model"), f"{at}.model",
                         {"type", "value"})
        if model.get("type", "Exact") != "Exact":
            raise _fail(at, "model.type must be Exact (the only match type)")
        if not isinstance(model.get("value"), str) or not model["value"]:
            raise _fail(at, "model.value must be a non-empty string")
        names.append(model["value"])
    return names


def parse_rewrites(doc: Any) -> ModelRewrites:
    """The rules of ``doc`` (NOTE(model-rewrite)); ValueError says what is wrong and where."""
    if isinstance(doc, dict) and "spec" in doc:
        doc = doc["spec"]
    rules = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(rules, list) or not rules:
        raise ValueError("expected an InferenceModelRewrite (spec.rules) or a mapping with "
                         "rules: a non-empty list")
    exact: dict[str, tuple[Target, ...]] = {}
    generic = None
    for i, rule in enumerate(rules):
        where = f"rules[{i}]"
        rule = _mapping(rule, where, _RULE_KEYS)
        names, targets = _matches(rule.get("matches"), where), _targets(rule.get("targets"), where)
        for name in names:
            exact.setdefault(name, targets)  # the first rule in the file wins
        if not names and generic is None:
            generic = targets
    return ModelRewrites(exact, generic)


def load_rewrites(path: str) -> ModelRewrites:
    """``--model-rewrites FILE``: YAML (JSON is YAML too) read and checked; ValueError names the
    file and what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--model-rewrites {path}: {exc}") from None
    try:
        import yaml  # PyYAML: the epp extra
        doc = yaml.safe_load(text)
    except ImportError:  # JSON alone without PyYAML
        doc = _json(text, path)
    except yaml.YAMLError as exc:
        raise ValueError(f"--model-rewrites {path}: not YAML or JSON: {exc}") from None
    try:
        return parse_rewrites(doc)
    except ValueError as exc:
        raise ValueError(f"--model-rewrites {path}: {exc}") from None


def _json(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--model-rewrites {path}: not JSON ({exc}; YAML needs PyYAML)") \
            from None
