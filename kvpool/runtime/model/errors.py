"""Exceptions of the model package (all are ``ValueError``s: bad input, never a bug)::

    ModelError
     +-- ModelConfigError     config.json value missing/unsupported (``.key`` names it)
     +-- ModelLoadError       a file of the model directory is missing or unreadable
          +-- WeightLoadError a checkpoint tensor is missing, unexpected or mis-shaped
"""

from __future__ import annotations

__all__ = ["ModelConfigError", "ModelError", "ModelLoadError", "WeightLoadError"]


class ModelError(ValueError):
    """Base class of this package's errors."""


class ModelConfigError(ModelError):
    """A config.json value is missing, malformed or unsupported; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config.json: {key}: {message}")
        self.key = key


class ModelLoadError(ModelError):
    """The model directory lacks a file or holds an unreadable one; the message names it."""


class WeightLoadError(ModelLoadError):
    """A checkpoint tensor is missing, unexpected or mis-shaped; the message names it."""
