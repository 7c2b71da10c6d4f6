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
from pathlib import Path

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
