"""The HTTP guard as a user runs it: `dsh-circuit-breaker serve --http 127.0.0.1:0` in a
process of its own, in a private HOME (hook_support.hook_env), and a small client."""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]
TOKEN = "test-token-0123456789abcdef"
READY = re.compile(r"guarding on (https?://\S+)")


def read_line(process: subprocess.Popen[bytes], seconds: float) -> str:
    """One line of the process's stdout within `seconds`; '' if none came."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + seconds
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace")


class Service:
    """A running `serve --http`; `stop()` ends it (tests use it as a context manager)."""

    def __init__(
        self,
        env: dict[str, str],
        *args: str,
        token: str | None = TOKEN,
        address: str = "127.0.0.1:0",
        cli: list[str] = CLI,
    ) -> None:
        """`cli`: the command that runs `dsh-circuit-breaker` (default: this interpreter's
        package; end-to-end tests pass the installed wheel's console script)."""
        command = [*cli, "serve", "--http", address, *args]
        if token is not None:
            command += ["--token", token]
        # Warnings to a file: a pipe nobody reads would fill up and stall the service.
        self.log = Path(env["HOME"]) / f"serve-{time.monotonic_ns()}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log
            )
        lines = read_line(self.process, 30)
        if lines.count("\n") < 2:  # its two lines are written at once, but may arrive apart
            lines += read_line(self.process, 5)
        found = READY.search(lines)
        if found is None:
            self.stop()
            raise RuntimeError(f"serve --http did not start: {lines!r} {self.stderr()}")
        self.origin = found.group(1)
        self.page_line = lines.splitlines()[-1]
        self.port = int(self.origin.rsplit(":", 1)[1])
        if token is None:  # the environment's, else the one the service keeps in a file
            file = Path(env["XDG_STATE_HOME"]) / "dsh-circuit-breaker" / "http-token"
            token = env.get("DSH_CIRCUIT_BREAKER_TOKEN") or file.read_text().strip()
        self.token = token

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-20000:]

    def request(
        self,
        method: str,
        path: str,
        body: bytes | dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        *,
        token: str | None = None,
        auth: bool = True,
    ) -> tuple[int, bytes, dict[str, str]]:
        """(status, body, headers) of one request on a new connection."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            sent = dict(headers or {})
            if auth:
                sent.setdefault("Authorization", f"Bearer {token or self.token}")
            data = json.dumps(body).encode() if isinstance(body, dict) else body
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            return response.status, response.read(), dict(response.getheaders())
        finally:
            connection.close()

    def hook(self, event: dict[str, Any], harness: str = "claude-code") -> bytes:
        status, body, _ = self.request("POST", f"/hook/{harness}", event)
        assert status == 200, (status, body)
        return body

    def json(self, path: str) -> Any:
        status, body, _ = self.request("GET", path)
        assert status == 200, (status, body)
        return json.loads(body)

    def metrics(self) -> str:
        status, body, headers = self.request("GET", "/metrics")
        assert status == 200, (status, body)
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return body.decode()


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics body, parsed by Prometheus' own text-format parser:
    (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def state_dir(home: Path) -> Path:
    return home / "state" / "dsh-circuit-breaker"
