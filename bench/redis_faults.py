"""Redis deployments with the fault verbs bench.remote_faults's schedule calls (start, pause,
resume, kill, stop), each verb aimed where a real fault would land: a cluster's masters, or
the master a sentinel names at that moment."""

from __future__ import annotations

from bench.redis_servers import RedisClusterProcs, RedisServer, SentinelProcs


class ClusterFaults:
    """A cluster with ``RedisServer``'s fault verbs: pause/resume one master, kill another and
    start it again (it rejoins as a replica)."""

    def __init__(self) -> None:
        self.cluster = RedisClusterProcs(masters=3, replicas=1)
        self._stopped = self._killed = None

    @property
    def url(self) -> str:
        """The cluster's seed URL now (a node that found its port taken moved at start:
        bench/redis_ports.py NOTE(port-hold))."""
        return self.cluster.url

    def start(self) -> None:
        if self._killed is None:
            self.cluster.start()
        else:
            self._killed.start()

    def pause(self) -> None:
        self._stopped = self.cluster.master_of("{a}")
        self._stopped.pause()

    def resume(self) -> None:
        self._stopped.resume()

    def kill(self) -> None:
        self._killed = next(n for n in (self.cluster.master_of(k) for k in ("{b}", "{c}", "{d}"))
                            if n is not self._stopped)
        self._killed.kill()

    def stop(self) -> None:
        self.cluster.stop()


class SentinelFaults:
    """A sentinel-managed master and replica with ``RedisServer``'s fault verbs, each aimed at
    the master the sentinel names at that moment."""

    def __init__(self) -> None:
        self.sentinel = SentinelProcs()
        self.url = self.sentinel.url
        self._stopped = self._killed = None

    def _master(self) -> RedisServer:
        s = self.sentinel
        return s.master if s.master_port() == s.master.port else s.replica

    def start(self) -> None:
        if self._killed is None:
            self.sentinel.start()
        else:
            self._killed.start()

    def pause(self) -> None:
        self._stopped = self._master()
        self._stopped.pause()

    def resume(self) -> None:
        self._stopped.resume()

    def kill(self) -> None:
        self._killed = self._master()
        self._killed.kill()

    def stop(self) -> None:
        self.sentinel.stop()


def fault_target(args):
    """The Redis the schedule hits: one server, a cluster or a sentinel pair."""
    if getattr(args, "cluster", False):
        return ClusterFaults()
    return SentinelFaults() if getattr(args, "sentinel", False) else RedisServer()
