"""Exceptions of the model package, hung under the project tree in ``kvpool.errors``.

All are ``ValueError``s (bad input, never a bug)::

    KVPoolError
     +-- ModelError (ValueError)
          +-- ModelConfigError (also kvpool.errors.ConfigError)   a config.json value is
          |                                   missing/unsupported; ``.key`` names it
          +-- ModelLoadError                  a model directory file is missing or unreadable
               +-- WeightLoadError            a checkpoint tensor is missing/unexpected/mis-shaped

(``SamplingParamsError`` lives in ``sampling.py`` and is a ``kvpool.errors.RequestError``.)
"""

from __future__ import annotations

from kvpool.errors import ConfigError, KVPoolError

__all__ = ["ModelConfigError", "ModelError", "ModelLoadError", "WeightLoadError"]


class ModelError(KVPoolError, ValueError):
    """Base class of this package's errors."""


class ModelConfigError(ModelError, ConfigError):
    """A config.json value is missing, malformed or unsupported; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config.json: {key}: {message}")
        self.key = key


class ModelLoadError(ModelError):
    """The model directory lacks a file or holds an unreadable one; the message names it."""


class WeightLoadError(ModelLoadError):
    """A checkpoint tensor is missing, unexpected or mis-shaped; the message names it."""
