"""A stand-in for the engine's step thread: another thread holds the pool lock (inside
``manager.batch()``) until ``release()``, so a test sees the asyncio fronts under contention."""

import threading


class HeldLock:
    """Another thread holds the pool lock until release()."""

    def __init__(self, mgr):
        self.held, self.go = threading.Event(), threading.Event()
        self.t = threading.Thread(target=self._run, args=(mgr,))
        self.t.start()
        self.held.wait(5)

    def _run(self, mgr):
        with mgr.batch():
            self.held.set()
            self.go.wait(5)

    def release(self):
        self.go.set()
        self.t.join(5)


class WorkerPause:
    """A front call (``front.call(pause)``) that blocks the front's worker right after the
    calls queued before it were applied, until ``resume()``: a test can then cancel a caller
    whose operation was applied but whose result has not arrived."""

    def __init__(self):
        self.applied, self.go = threading.Event(), threading.Event()

    def __call__(self):
        self.applied.set()
        self.go.wait(5)

    def resume(self):
        self.go.set()
