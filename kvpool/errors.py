"""The kvpool exception tree.

Scarcity is a return value (``None``, ``AllocStatus.LATER``); these exceptions are for misuse
and for failures that must not pass silently::

    KVPoolError
    ├── ConfigError (ValueError)         a config value is invalid; the message names the fix
    ├── BlockManagerError                misuse of the block manager / pool
    │   ├── DoubleFreeError              a block or sequence freed twice
    │   ├── UnknownSequenceError (KeyError)  a seq id the manager does not know
    │   ├── DuplicateSequenceError       a seq id allocated twice
    │   ├── InvalidBlockError            a block id outside the pool or not in the state asked for
    │   ├── OutOfBlocksError             a mutation was asked for without checking capacity first
    │   └── InvariantError (AssertionError)  check_invariants() found corrupted state
    ├── SchedulerError                   scheduler misuse (unknown request, bad state)
    │   └── RequestRejected              a request can never be served (e.g. prompt too long)
    ├── EngineError                      runtime failures (copy engine, model step)
    │   ├── CopyError                    a block copy failed; the affected request is failed
    │   └── QueueFullError               a bounded queue is full (HTTP 503 at the edge)
    └── RequestError (ValueError)        a request's parameters are invalid (HTTP 400 at the edge)
"""

from __future__ import annotations


class KVPoolError(Exception):
    """Root of every exception kvpool raises on purpose."""


class ConfigError(KVPoolError, ValueError):
    """An invalid configuration value. The message names the field and the fix."""


def require(cond: bool, message: str) -> None:
    """Raise ConfigError(message) unless ``cond``: every config class validates through this."""
    if not cond:
        raise ConfigError(message)


class BlockManagerError(KVPoolError):
    """Misuse of the block pool or block manager."""


class DoubleFreeError(BlockManagerError):
    """A block whose ref count is already zero, or a freed sequence, was freed again."""


class UnknownSequenceError(BlockManagerError, KeyError):
    """The block manager holds no block table for this sequence id."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown sequence"


class DuplicateSequenceError(BlockManagerError):
    """A sequence id that already has a block table was allocated again."""


class InvalidBlockError(BlockManagerError):
    """A block id outside the pool, or a block not in the state the caller assumed."""


class OutOfBlocksError(BlockManagerError):
    """A mutation needed more free blocks than there are: call the can_* check first."""


class InvariantError(BlockManagerError, AssertionError):
    """``check_invariants()`` found an inconsistency (a bug, never a user error)."""


class SchedulerError(KVPoolError):
    """Scheduler misuse: unknown request id, request in the wrong state."""


class RequestRejected(SchedulerError):
    """A request that can never be served (for example a prompt larger than the whole pool)."""


class EngineError(KVPoolError):
    """A runtime failure inside the engine (copy engine, model step)."""


class CopyError(EngineError):
    """A block copy failed; the request that needed it is failed, others continue."""


class QueueFullError(EngineError):
    """A bounded queue is full; retry later (HTTP 503 with Retry-After at the edge)."""


class RequestError(KVPoolError, ValueError):
    """Invalid request parameters. ``param`` names the offending field (OpenAI error JSON)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code

    @classmethod
    def field(cls, param: str | None, message: str, code: str | None = None) -> RequestError:
        """The error of one request field: the message leads with its name (``"n: must be
        >= 1"``), as every parser of the server words it."""
        return cls(f"{param}: {message}" if param else message, param=param, code=code)


CONTEXT_LENGTH_CODE = "context_length_exceeded"


def context_length_error(max_model_len: int, detail: str, param: str | None = None, *,
                         named: bool = False) -> RequestError:
    """The one wording of "too long for the model's context" (OpenAI's, with its code), for
    every bound that refuses it; ``named`` leads with ``param`` as the server's parser does."""
    text = f"this model's maximum context length is {max_model_len} tokens; {detail}"
    return RequestError(f"{param}: {text}" if named and param else text, param,
                        CONTEXT_LENGTH_CODE)


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)`` for an error message, cut short: a JSON integer may have thousands of
    digits, and a 400 answer should not echo them all."""
    r = repr(value)
    return r if len(r) <= limit else r[:limit - 3] + "..."
