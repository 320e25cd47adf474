"""A hub id already in the local Hugging Face cache, read where it lies; nothing is downloaded.

NOTE(hf-cache): deployments written for vLLM pass a hub id (``Qwen/Qwen3-0.6B``) with the
cache mounted (``HF_HOME`` on a volume, ``~/.cache/huggingface`` bind-mounted, often with
``HF_HUB_OFFLINE=1``). The model is on disk in huggingface_hub's layout::

    <cache>/models--Qwen--Qwen3-0.6B/refs/main               the revision main points at
    <cache>/models--Qwen--Qwen3-0.6B/snapshots/<revision>/   the files (symlinks into blobs/)

``<cache>`` is ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``, as
huggingface_hub resolves it. A hub id whose snapshot holds a config.json is read from there;
anything else stays the "download it yourself" error (loader.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["cached_snapshot"]


def _roots(env: Mapping[str, str]) -> list[Path]:
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"])]
    if env.get("HF_HOME"):
        return [Path(env["HF_HOME"]) / "hub"]
    return [Path.home() / ".cache" / "huggingface" / "hub"]


def cached_snapshot(model: str, env: Mapping[str, str] = os.environ) -> Path | None:
    """The snapshot directory of hub id ``model`` in the local cache, or None: not a hub id
    (``org/name`` that names no local path), not cached, or no config.json there."""
    if model.count("/") != 1 or Path(model).exists() or model.startswith(("/", ".")):
        return None
    folder = "models--" + model.replace("/", "--")
    for root in _roots(env):
        base = root / folder
        ref = base / "refs" / "main"
        snaps = base / "snapshots"
        if ref.is_file():
            found = snaps / ref.read_text(encoding="utf-8").strip()
        else:  # no main ref: the one snapshot there, if there is exactly one
            items = sorted(snaps.iterdir()) if snaps.is_dir() else []
            found = items[0] if len(items) == 1 else None
        if found is not None and (found / "config.json").is_file():
            return found
    return None
