"""Real Redis processes on 127.0.0.1 for tests and benchmarks, started and stopped by pid.

Three shapes: a standalone server (``RedisServer``), a cluster (``RedisClusterProcs``: masters,
optionally a replica each, joined by ``redis-cli --cluster create``) and a Sentinel-managed
master with a replica (``SentinelProcs``). bench/ and tests/ both import this module (bench
never imports tests).

``RedisServer(port)`` runs ``/usr/bin/redis-server`` with no persistence and an LRU memory
bound (the production shape). ``kill()`` (SIGKILL), ``pause()``/``resume()`` (SIGSTOP/SIGCONT)
and ``start()`` again on the same port drive the fault tests. ``policy``, ``password``,
``tls`` (``tls_certs.TlsFiles``: the port speaks TLS only) and ``extra_args`` shape the
misconfigured servers of the diagnosis tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from bench.redis_ports import PortTaken, ping, reserve_port, server_pid

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer:
    def __init__(self, port: int | None = None, maxmemory: str = "256mb",
                 policy: str = "allkeys-lru", password: str | None = None, tls=None,
                 extra_args: tuple[str, ...] = (),
                 held: list[socket.socket] | None = None) -> None:
        # the port's holding sockets, closed once this server answers (NOTE(port-hold))
        self._held = held or []
        if not port:
            port, self._held = reserve_port()
        self.port = port
        self.maxmemory = maxmemory
        self.policy = policy
        self.password = password
        self.tls = tls
        self.extra_args = tuple(extra_args)
        auth = f":{password}@" if password else ""
        self.url = (f"redis://{auth}127.0.0.1:{self.port}/0" if tls is None else
                    f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={tls.ca}")
        self.proc: subprocess.Popen | None = None
        self._dir = tempfile.mkdtemp(prefix="kvpool-redis-")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, wait_s: float = 10.0) -> None:
        assert self.proc is None, "already running"
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--save", "", "--appendonly", "no", "--maxmemory", self.maxmemory,
             "--maxmemory-policy", self.policy, *self._listen_args(),
             "--bind", "127.0.0.1", "--dir", self._dir, "--daemonize", "no",
             "--loglevel", "warning", *self.extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + wait_s
        ca = None if self.tls is None else str(self.tls.ca)
        while (pid := server_pid(self.port, ca, self.password)) != self.proc.pid:
            gone = self.proc.poll() is not None
            if gone or pid is not None or time.monotonic() > deadline:
                ours = self.proc.pid
                self.stop()
                if pid is not None or (gone and ping(self.port, ca=ca)):
                    raise PortTaken(f"port {self.port} is served by another process's "
                                    f"redis-server (pid {pid}), not this one (pid {ours})")
                raise RuntimeError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.02)
        self._release()

    def _release(self) -> None:
        for s in self._held:
            s.close()
        self._held = []

    def _listen_args(self) -> list[str]:
        out = ["--requirepass", self.password] if self.password else []
        if self.tls is None:
            return out + ["--port", str(self.port)]
        t = self.tls
        return out + ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(t.cert),
                      "--tls-key-file", str(t.key), "--tls-ca-cert-file", str(t.ca),
                      "--tls-auth-clients", "no"]

    def kill(self) -> None:
        """SIGKILL and reap (a crash: no shutdown, the data is gone)."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process must die too
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        terminate(self.proc)
        self.proc = None
        self._release()
        shutil.rmtree(self._dir, ignore_errors=True)


def terminate(proc: subprocess.Popen | None) -> None:
    """SIGTERM ``proc`` (continued first, if stopped) and reap it; SIGKILL after 10 s."""
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def _command(port: int, *args: str, timeout: float = 2.0) -> str:
    """One command through redis-cli (plain text reply)."""
    r = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port), *args],
                       capture_output=True, text=True, timeout=timeout)
    return r.stdout


def _wait(cond, wait_s: float, what: str) -> None:
    deadline = time.monotonic() + wait_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def kill_once_acked(master: RedisServer, replicas: int, wait_s: float) -> None:
    """SIGKILL ``master`` once every replica attached to it (at least ``replicas``) has
    acknowledged the master's whole replication stream: Redis replicates asynchronously, and
    a failover may promote any of them, so a failover after the kill loses nothing.
    RuntimeError, and no kill, when they have not within ``wait_s``.

    Not WAIT: since Redis 7 WAIT waits for the calling connection's own last write, so from
    a fresh connection it returned at once and the kill could lose the tests' writes (the
    replica promoted without them). Replicas report their offset about once a second."""
    deadline = time.monotonic() + wait_s
    while True:
        offset, acked = replication_offsets(master.port)
        if len(acked) >= replicas and all(a >= offset for a in acked):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"replicas of port {master.port} at offsets {acked} of {offset} "
                               f"(want {replicas}+) after {wait_s} s: not killing it")
        time.sleep(0.05)
    master.kill()


def replication_offsets(port: int) -> tuple[int, list[int]]:
    """The server's replication offset, and the offset each attached replica acknowledged
    (INFO replication)."""
    offset, acked = 0, []
    for line in _command(port, "INFO", "replication").splitlines():
        key, _, value = line.strip().partition(":")
        if key == "master_repl_offset":
            offset = int(value)
        elif key.startswith("slave") and key[5:].isdigit():
            fields = dict(f.split("=", 1) for f in value.split(",") if "=" in f)
            acked.append(int(fields.get("offset", -1)))
    return offset, acked


class RedisClusterProcs:
    """``masters`` cluster nodes (+ ``replicas`` per master) on held port pairs
    (NOTE(port-hold)), joined with ``redis-cli --cluster create``; ``url`` lists every master
    as a seed node."""

    def __init__(self, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 1000) -> None:
        args = ("--cluster-enabled", "yes", "--cluster-node-timeout", str(node_timeout_ms),
                # a replica always stands for election, however long ago it heard its master
                # (a loaded box can delay the link past the default 10 node timeouts)
                "--cluster-replica-validity-factor", "0",
                # a replica's first sync starts at once: the default waits 5 s for more
                # replicas to share one transfer, and each master has one
                "--repl-diskless-sync-delay", "0")
        self.nodes = [self._node(args) for _ in range(masters * (1 + replicas))]
        self.masters, self.replicas = masters, replicas

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(
            f"127.0.0.1:{n.port}" for n in self.nodes[:self.masters])

    @staticmethod
    def _node(args: tuple[str, ...]) -> RedisServer:
        port, held = reserve_port(cluster=True)
        return RedisServer(port, extra_args=args, held=held)

    def _started(self, node: RedisServer, tries: int = 5) -> RedisServer:
        """``node`` started, or a node like it on another held port while another process's
        server answers on its port (PortTaken, NOTE(port-hold))."""
        for _ in range(tries):
            try:
                node.start()
                return node
            except PortTaken:
                node = self._node(node.extra_args)
        raise RuntimeError(f"another process took each of {tries} ports held for a node")

    def start(self, wait_s: float = 30.0) -> None:
        try:
            for i, n in enumerate(self.nodes):  # in place: stop() reaches each one started
                self.nodes[i] = self._started(n)
            r = subprocess.run(
                [REDIS_CLI, "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes],
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=wait_s)
            if r.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {r.stdout}{r.stderr}")
            _wait(self.healthy, wait_s, "cluster_state:ok on every node and "
                  f"{self.replicas} synced replica(s) on every master")
        except BaseException:
            self.stop()
            raise

    def healthy(self) -> bool:
        """Every running node says cluster_state:ok, every replica is in sync with its master
        (a replica that never synced is not eligible for a failover), and every master serving
        slots has ``replicas`` of them online (a kill's failover needs one)."""
        live = self._live()
        if not all("cluster_state:ok" in _command(n.port, "CLUSTER", "INFO") for n in live):
            return False
        roles = {n.port: _command(n.port, "INFO", "replication") for n in live}
        if not all("master_link_status:up" in r for r in roles.values() if "role:slave" in r):
            return False
        return all(roles.get(port, "").count("state=online") >= self.replicas
                   for port in self._serving())

    def master_of(self, key: str) -> RedisServer:
        """The master serving ``key``'s slot now."""
        slot = int(_command(self._live()[0].port, "CLUSTER", "KEYSLOT", key).strip())
        return self._slot_owner(slot)

    def kill_master_of(self, key: str, wait_s: float = 30.0) -> RedisServer:
        """SIGKILL the master serving ``key`` once the cluster is healthy and its replicas
        acknowledged every write (``kill_once_acked``), so a failover loses nothing; the
        killed node."""
        _wait(self.healthy, wait_s, "a healthy cluster before the kill")
        m = self.master_of(key)
        kill_once_acked(m, self.replicas, wait_s)
        return m

    def view(self) -> str:
        """CLUSTER NODES as a live node sees it (for a failure message)."""
        live = next((n for n in self._live() if ping(n.port)), None)
        return "no live node" if live is None else _command(live.port, "CLUSTER", "NODES")

    def _slot_owner(self, slot: int) -> RedisServer:
        for port, ranges in self._serving().items():
            if any(lo <= slot <= hi for lo, hi in ranges):
                return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no master serves slot {slot}")

    def _serving(self) -> dict[int, list[tuple[int, int]]]:
        """Port -> slot ranges of each master serving slots, not failed, as CLUSTER NODES on
        a live node says."""
        out: dict[int, list[tuple[int, int]]] = {}
        for line in _command(self._live()[0].port, "CLUSTER", "NODES").splitlines():
            f = line.split()
            if "master" not in f[2] or "fail" in f[2]:
                continue
            for rng in f[8:]:
                lo, _, hi = rng.partition("-")
                if lo.isdigit():
                    port = int(f[1].split(":")[1].split("@")[0])
                    out.setdefault(port, []).append((int(lo), int(hi or lo)))
        return out

    def _live(self) -> list[RedisServer]:
        """The nodes running now (started, not killed)."""
        return [n for n in self.nodes if n.proc is not None]

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


class SentinelProcs:
    """A master, a replica of it and one sentinel (quorum 1) watching them as ``service``;
    ``url`` is the tier's ``redis+sentinel://`` URL."""

    def __init__(self, service: str = "kvp", down_after_ms: int = 1000) -> None:
        self.service = service
        self.master = RedisServer()
        self.replica = RedisServer(extra_args=("--replicaof", "127.0.0.1",
                                               str(self.master.port)))
        # held until stop(): the sentinel binds it with SO_REUSEADDR (NOTE(port-hold))
        self.port, self._held = reserve_port()
        self._dir = tempfile.mkdtemp(prefix="kvpool-sentinel-")
        self._down_after_ms = down_after_ms
        self.proc: subprocess.Popen | None = None
        self.url = f"redis+sentinel://127.0.0.1:{self.port}/{service}"

    def start(self, wait_s: float = 30.0) -> None:
        try:
            self.master.start()
            self.replica.start()
            conf = os.path.join(self._dir, "sentinel.conf")
            s, m = self.service, self.master.port
            with open(conf, "w") as f:
                f.write(f"port {self.port}\nbind 127.0.0.1\ndir {self._dir}\n"
                        f"sentinel monitor {s} 127.0.0.1 {m} 1\n"
                        f"sentinel down-after-milliseconds {s} {self._down_after_ms}\n"
                        f"sentinel failover-timeout {s} 5000\n")
            self.proc = subprocess.Popen([REDIS_SERVER, conf, "--sentinel"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _wait(self._replica_ready, wait_s, "the sentinel to see a synced replica")
        except BaseException:
            self.stop()
            raise

    def master_port(self) -> int | None:
        """The port the sentinel names as the master now."""
        out = _command(self.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service).split()
        return int(out[1]) if len(out) == 2 else None

    def _replica_ready(self) -> bool:
        out = _command(self.port, "SENTINEL", "REPLICAS", self.service).split()
        return "master-link-status" in out and out[out.index("master-link-status") + 1] == "ok"

    def kill_master(self, wait_s: float = 30.0) -> None:
        """SIGKILL the master once the sentinel sees a synced replica that acknowledged
        every write (``kill_once_acked``)."""
        _wait(self._replica_ready, wait_s, "a synced replica before the kill")
        kill_once_acked(self.master, 1, wait_s)

    def view(self) -> str:
        """The sentinel's master, and each server's role and key count (a failure message)."""
        lines = [f"sentinel master port: {self.master_port()}"]
        for name, srv in (("master", self.master), ("replica", self.replica)):
            if not ping(srv.port):
                lines.append(f"{name} {srv.port}: down")
                continue
            role = (_command(srv.port, "ROLE").split() or ["?"])[0]
            keys = _command(srv.port, "DBSIZE").strip()
            lines.append(f"{name} {srv.port}: {role}, {keys} keys")
        return "\n".join(lines)

    def failover(self, wait_s: float = 30.0) -> int:
        """``SENTINEL FAILOVER`` (retried until the sentinel accepts it), then wait until the
        other server is the master; its port."""
        old = self.master_port()
        new = self.replica.port if old == self.master.port else self.master.port
        _wait(self._replica_ready, wait_s, "a synced replica")
        _wait(lambda: _command(self.port, "SENTINEL", "FAILOVER", self.service).startswith(
            ("OK", "INPROG")), wait_s, "the sentinel to accept FAILOVER")
        _wait(lambda: self.master_port() == new and "role:master" in _command(
            new, "INFO", "replication"), wait_s, "the sentinel's failover")
        return new

    def stop(self) -> None:
        terminate(self.proc)
        self.proc = None
        for s in self._held:
            s.close()
        self._held = []
        self.replica.stop()
        self.master.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
