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
