"""A real redis-server (Debian's) on 127.0.0.1, on a free port, in a temporary directory.

`shared_server()` is one server for the whole test session (the store contract suite and
most Redis tests; each test uses its own key prefix, so tests never see each other's
agents). Fault tests start their own `RedisServer` so they can stop and restart it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REDIS_SERVER = shutil.which("redis-server")


def redis_available() -> bool:
    """redis-server and the redis client library are both installed."""
    try:
        import redis  # noqa: F401
    except ImportError:
        return False
    return REDIS_SERVER is not None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One redis-server process. `persistent` keeps data across stop/start (AOF, fsync
    on every write), as a production server would, so a restart tests recovery."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        persistent: bool = False,
        password: str | None = None,
        tls: tuple[Path, Path, Path] | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed")
        self._own_dir = directory is None
        self.dir = Path(directory or tempfile.mkdtemp(prefix="dshcb-redis-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.password = password
        self.persistent = persistent
        self.tls = tls  # (CA certificate, server certificate, server key): TLS only
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None
        self._owner = os.getpid()  # a forked test worker inherits this object: hands off

    @property
    def url(self) -> str:
        if self.tls:
            return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls[0]}"
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        # The store falls back to REDIS_PASSWORD; a developer's own must not reach the
        # test servers (tests that want it set it themselves, with monkeypatch).
        os.environ.pop("REDIS_PASSWORD", None)
        args = [
            str(REDIS_SERVER),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", str(self.dir / "redis.log"),
            "--save", "",
        ]  # fmt: skip
        if self.tls:
            ca, cert, key = self.tls
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(cert),
                     "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
                     "--tls-auth-clients", "no"]  # fmt: skip
        else:
            args += ["--port", str(self.port)]
        if self.persistent:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        args += list(self.extra)
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 10.0) -> None:
        assert self.process is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n{log}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw,
            ):
                sock = raw
                if self.tls:
                    context = ssl.create_default_context(cafile=str(self.tls[0]))
                    sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
                sock.sendall(b"PING\r\n")
                reply = sock.recv(64)
                # With requirepass, an unauthenticated PING says NOAUTH: still up.
                if reply.startswith((b"+PONG", b"-NOAUTH")):
                    return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not come up in {timeout}s")

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM (a clean shutdown) or SIGKILL (a crash); waits for the process to end."""
        if self.process is None:
            return
        if self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def close(self) -> None:
        if os.getpid() != self._owner:
            return
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared: RedisServer | None = None


def shared_server() -> RedisServer:
    """The session's server, started on first use and stopped when the tests end."""
    global _shared
    if _shared is None or _shared.process is None or _shared.process.poll() is not None:
        _shared = RedisServer().start()
        atexit.register(_shared.close)
    return _shared


def fresh_url(server: RedisServer | None = None, **params: str) -> str:
    """A URL on `server` (default: the shared one) with a prefix no other test uses."""
    server = server or shared_server()
    query = {"prefix": f"test-{uuid.uuid4().hex[:12]}:", **params}
    return server.url + "?" + "&".join(f"{k}={v}" for k, v in query.items())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


REDIS_CLI = shutil.which("redis-cli")


def cluster_available() -> bool:
    """A cluster needs redis-cli as well (`redis-cli --cluster create`)."""
    return redis_available() and REDIS_CLI is not None


def command(port: int, *args: Any) -> Any:
    """One command to the server on `port` (redis-py, for the tests' own setup)."""
    import redis

    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=10) as client:
        return client.execute_command(*args)


def _cluster_port() -> int:
    """A free port whose cluster bus port (the port + 10000) is free too, and a port."""
    while True:
        port = free_port()
        if port + 10000 < 65536:
            with contextlib.suppress(OSError), socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 10000))
                return port


def _wait(what: str, ready: Callable[[], bool], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not happen within {timeout}s")


class RedisCluster:
    """Three `redis-server --cluster-enabled yes` masters (no replicas), made into one
    cluster by `redis-cli --cluster create`; `migrate_slot` moves a slot live."""

    def __init__(self, masters: int = 3) -> None:
        if REDIS_CLI is None:
            raise RuntimeError("redis-cli is not installed")
        self.dir = Path(tempfile.mkdtemp(prefix="dshcb-cluster-"))
        self.nodes = [
            RedisServer(
                self.dir / f"node{i}",
                extra=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "5000",
                    "--cluster-config-file",
                    "nodes.conf",
                ),
            )
            for i in range(masters)
        ]
        for node in self.nodes:
            node.port = _cluster_port()

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> RedisCluster:
        for node in self.nodes:
            node.start()
        subprocess.run(
            [str(REDIS_CLI), "--cluster", "create",
             *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        for node in self.nodes:

            def ok(port: int = node.port) -> bool:
                return b"cluster_state:ok" in _bytes(command(port, "CLUSTER", "INFO"))

            _wait(f"cluster state ok on {node.port}", ok)
        return self

    def node_id(self, port: int) -> str:
        return _bytes(command(port, "CLUSTER", "MYID")).decode()

    def owner(self, slot: int) -> int:
        """The port of the node that serves `slot`."""
        for first, last, (_host, port, *_), *_ in command(self.nodes[0].port, "CLUSTER", "SLOTS"):
            if first <= slot <= last:
                return int(port)
        raise LookupError(slot)

    def migrate_slot(self, slot: int, to: int, pause: float = 0.0) -> int:
        """Move `slot` to the node on port `to` the way `redis-cli --cluster reshard`
        does (IMPORTING, MIGRATING, MIGRATE key by key, SETSLOT NODE), sleeping `pause`
        between keys so that clients meet the ASK window. Returns the keys moved."""
        source = self.owner(slot)
        source_id, target_id = self.node_id(source), self.node_id(to)
        command(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        while True:
            keys = command(source, "CLUSTER", "GETKEYSINSLOT", slot, 1)
            if not keys:
                break
            command(source, "MIGRATE", "127.0.0.1", to, "", 0, 5000, "KEYS", *keys)
            moved += 1
            time.sleep(pause)
        for node in self.nodes:
            command(node.port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return moved

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


class RedisSentinel:
    """A master, one replica of it and one Sentinel watching them (quorum 1, a master
    unreachable for half a second is down), each a real redis-server."""

    SERVICE = "dshcb"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="dshcb-sentinel-"))
        self.master = RedisServer(self.dir / "master")
        self.replica = RedisServer(self.dir / "replica")
        self.sentinel_port = free_port()
        self.sentinel: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{self.SERVICE}"

    def start(self) -> RedisSentinel:
        self.master.start()
        self.replica.extra = ("--replicaof", "127.0.0.1", str(self.master.port))
        self.replica.start()
        _wait(
            "the replica's sync",
            lambda: command(self.replica.port, "INFO", "replication")["master_link_status"] == "up",
        )
        directory = self.dir / "sentinel"
        directory.mkdir()
        conf = directory / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\nbind 127.0.0.1\nprotected-mode no\n"
            f"dir {directory}\nlogfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {self.SERVICE} 500\n"
            f"sentinel failover-timeout {self.SERVICE} 5000\n"
        )
        assert REDIS_SERVER is not None
        self.sentinel = subprocess.Popen(
            [REDIS_SERVER, str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        # A failover needs a replica the sentinel knows of (it learns them from INFO).
        _wait(
            "the sentinel finding the replica",
            lambda: len(command(self.sentinel_port, "SENTINEL", "REPLICAS", self.SERVICE)) == 1,
        )
        return self

    def master_port(self) -> int:
        _host, port = command(
            self.sentinel_port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.SERVICE
        )
        return int(port)

    def kill_master(self) -> None:
        """SIGKILL the master; the sentinel then promotes the replica."""
        self.master.stop(kill=True)

    def wait_failover(self, timeout: float = 30.0) -> None:
        _wait("the failover", lambda: self.master_port() == self.replica.port, timeout)

    def close(self) -> None:
        if self.sentinel is not None:
            self.sentinel.kill()
            self.sentinel.wait(timeout=10)
            self.sentinel = None
        self.master.close()
        self.replica.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisSentinel:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()
