"""The process the router renders its replicas' chat templates in (kv_render.py RenderGuard).

NOTE(render-process): a template that spends its time in one C call (``list.count`` over
two large lists, ``|sum`` over big integers, ``''.replace('', s)`` building a GB) holds the
GIL, so neither an event loop nor a timer in the router's process runs until it returns (6-23 s
against a 0.5 s budget, second sandbox probe). So the renders run in one long-lived child
process, which the router can kill by pid (kv_render.py NOTE(render-budget)):

- started from multiprocessing's forkserver (never a fork of the router, which holds an event
  loop and threads), whose server has the tokenizer's modules (torch among them) imported once:
  a replacement after a kill starts in milliseconds, not the seconds of that import;
- it keeps a PromptKeys per spec (its tokenizer loaded there): the router sends a spec's info
  with its first chat, then names it by id (and the ids of specs it dropped, to forget);
- a render may add RENDER_MEMORY bytes of address space above what the process holds after
  loading its specs (RLIMIT_AS), so a template building GBs fails there with MemoryError (a
  render failure: that chat is placed without its keys), not in the router;
- it exits when its pipe closes (the router closed it or died) and, on Linux, is killed when
  the forkserver is (which exits with the router), so a render stuck in C does not outlive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import resource
import signal
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from kvpool.router.kv_prompt import PromptKeys
from kvpool.server.template_sandbox import TemplateRefused

__all__ = ["BEGAN", "DONE", "FAILED", "REFUSED", "RENDER_MEMORY", "RenderWorker"]

RENDER_MEMORY = 2 << 30  # bytes of address space a render may add (NOTE(render-process))
BEGAN, DONE, REFUSED, FAILED = "began", "done", "refused", "failed"  # what the child answers
# imported once in the forkserver, so each child starts with them (NOTE(render-process))
_PRELOAD = ["kvpool.router.render_worker", "kvpool.runtime.model",
            "kvpool.server.chat_template", "kvpool.server.protocol"]
_PR_SET_PDEATHSIG = 1


class RenderWorker:
    """One render process, seen from the router's event loop: ``answer(message)`` is called
    on the loop with each of its answers, and with None once it is gone."""

    def __init__(self, memory: int) -> None:
        """Blocking (the forkserver's first start imports torch): construct off the loop."""
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child, memory), name="router-render",
                                daemon=True)
        self.proc.start()
        child.close()
        self._sent: dict[int, weakref.ref] = {}  # spec ids the child holds -> their PromptKeys
        self._loop: asyncio.AbstractEventLoop | None = None

    def listen(self, answer: Callable[[Any], None]) -> None:
        """On the loop: hand each answer of the child to ``answer`` (a pipe read when it is
        readable, so the loop never waits on the child)."""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.conn.fileno(), self._readable, answer)

    def _readable(self, answer: Callable[[Any], None]) -> None:
        try:
            got = self.conn.recv()
        except (EOFError, OSError):  # killed, or died: answered once, as gone
            self._unlisten()
            got = None
        answer(got)

    def send(self, rid: int, sid: int, keys: PromptKeys, body: dict,
             headers: Sequence[tuple[str, str]]) -> bool:
        """Ask the child for ``keys.keys(body, headers)``; True when it starts at once (the
        spec is loaded there), else it answers BEGAN after loading it."""
        known = sid in self._sent
        forget = [s for s, ref in self._sent.items() if ref() is None]
        for s in forget:
            del self._sent[s]
        self.conn.send((rid, sid, None if known else keys.info, forget, body, list(headers)))
        self._sent[sid] = weakref.ref(keys)
        return known

    def _unlisten(self) -> None:
        if self._loop is not None and not self.conn.closed:
            self._loop.remove_reader(self.conn.fileno())
        self._loop = None

    def kill(self) -> None:
        """SIGKILL by pid (a render stuck in C sees nothing else) and let go of the pipe."""
        self._unlisten()
        self.conn.close()
        if self.proc.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)

    def alive(self) -> bool:
        """Whether the process still runs (reaps it once ended)."""
        return self.proc.is_alive()


def serve(conn: Connection, memory: int) -> None:
    """The child: answer renders until the pipe closes (NOTE(render-process))."""
    with contextlib.suppress(OSError, AttributeError):  # Linux: die with the forkserver
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    specs: dict[int, PromptKeys] = {}
    while True:
        try:
            rid, sid, info, forget, body, headers = conn.recv()
        except (EOFError, OSError):
            return
        for s in forget:
            specs.pop(s, None)
        conn.send(_render(conn, specs, memory, rid, sid, info, body, headers))


def _render(conn: Connection, specs: dict[int, PromptKeys], memory: int, rid: int, sid: int,
            info: dict | None, body: dict, headers: list) -> tuple[int, str, Any]:
    try:
        keys = specs.get(sid)
        if keys is None:
            _limit(None)  # loading a tokenizer is the router's own code: not bounded
            keys = PromptKeys(info)  # type: ignore[arg-type]
            keys.load_parser()
            specs[sid] = keys
            _limit(memory)
            conn.send((rid, BEGAN, None))
        return rid, DONE, keys.keys(body, headers)
    except TemplateRefused as exc:
        return rid, REFUSED, str(exc)
    except Exception as exc:  # noqa: BLE001 - MemoryError at RLIMIT_AS among them
        return rid, FAILED, repr(exc)


def _limit(memory: int | None) -> None:
    """RLIMIT_AS: ``memory`` bytes above the address space held now; None lifts it."""
    with contextlib.suppress(OSError, ValueError):
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = hard if memory is None else _vm_bytes() + memory
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _vm_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize")
