"""The HTTP guard under attack (issue 23), a real `serve --http` over real sockets:

- a squatter on the port (this user's program, another user's socket) is never sent the
  token, `--ensure` refuses naming it, and `--stop` signals no pid it reports;
- 300 clients trickling heads without a token: the harness's calls and 300 simultaneous
  valid ones are all answered; headers of megabytes are cut off at 16 KiB, memory flat;
- a second Content-Length, a body on a GET, a malformed head: refused, never read as a
  second request; every answer, errors included, carries `nosniff`;
- TLS on 0.0.0.0: the page's own POST (Origin = the address it was loaded from) passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from hook_support import hook_env, pre_tool_use
from support.guard_service import CLI, TOKEN, Service

pytestmark = pytest.mark.timeout(120)

# A fake guard: answers every request `{"ok": true, "pid": PID}` (PID: argv[2]) and
# prints each request's head on stdout. Plain python3, so that another user can run it.
SQUATTER = r"""
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def _any(self):
        print(json.dumps([self.command, self.path, dict(self.headers)]), flush=True)
        body = json.dumps({"ok": True, "pid": int(sys.argv[2]), "proof": "0" * 64}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _any
    def log_message(self, *a): pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("ready", flush=True)
server.serve_forever()
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return hook_env(tmp_path)


@pytest.fixture
def service(env: dict[str, str]) -> Any:
    with Service(env) as running:
        yield running


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def squatter(port: int, pid: int, *as_user: str) -> Any:
    process = subprocess.Popen(
        [*as_user, "/usr/bin/python3", "-c", SQUATTER, str(port), str(pid)],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        yield process
    finally:
        process.terminate()
        process.wait(10)


def heard(process: subprocess.Popen[str]) -> list[Any]:
    """The request heads the squatter printed (it is stopped first)."""
    process.terminate()
    out, _ = process.communicate(timeout=10)
    return [json.loads(line) for line in out.splitlines() if line.startswith("[")]


def serve(env: dict[str, str], port: int, option: str) -> subprocess.CompletedProcess[str]:
    command = [*CLI, "serve", "--http", f"127.0.0.1:{port}", option]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_a_squatter_of_this_user_is_never_sent_the_token(env: dict[str, str]) -> None:
    port = free_port()
    bystander = subprocess.Popen(["sleep", "60"])  # the pid the squatter reports
    try:
        with squatter(port, bystander.pid) as fake:
            ensured = serve(dict(env, DSH_CIRCUIT_BREAKER_TOKEN=TOKEN), port, "--ensure")
            stopped = serve(dict(env, DSH_CIRCUIT_BREAKER_TOKEN=TOKEN), port, "--stop")
            requests = heard(fake)
        assert ensured.returncode == 1, ensured
        assert "cannot prove it holds this token" in ensured.stderr
        assert "it was not sent the token" in ensured.stderr
        assert stopped.returncode == 1 and "cannot prove" in stopped.stderr
        assert bystander.poll() is None  # no signal went to the pid it named
        assert requests and all(path.startswith("/proof?nonce=") for _, path, _ in requests)
        assert not any(TOKEN in json.dumps(r) for r in requests)
    finally:
        bystander.kill()
        bystander.wait(10)


def test_a_squatter_of_another_user_is_named_and_refused(env: dict[str, str]) -> None:
    require(os.geteuid() == 0, "root, to run a squatter as another user (uid 65534)")
    port = free_port()
    nobody = ("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups")
    with squatter(port, os.getpid(), *nobody) as fake:
        ensured = serve(dict(env, DSH_CIRCUIT_BREAKER_TOKEN=TOKEN), port, "--ensure")
        requests = heard(fake)
    assert ensured.returncode == 1, ensured
    assert f"port {port} on 127.0.0.1 is held by" in ensured.stderr
    assert "(uid 65534), not by you" in ensured.stderr
    assert requests == []  # not even the challenge: nothing went to it


def test_stop_asks_our_guard_and_signals_no_pid(tmp_path: Path, env: dict[str, str]) -> None:
    port = free_port()
    assert serve(env, port, "--ensure").returncode == 0
    stopped = serve(env, port, "--stop")
    assert stopped.returncode == 0 and "stopped the guard" in stopped.stdout
    assert serve(env, port, "--stop").stdout.startswith("no guard answers")


async def trickle(port: int, cut: list[float]) -> None:
    """A request head without a token, a byte every half second."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    try:
        for byte in b"POST /hook/claude-code HTTP/1.1\r\nX-Pad: " + b"a" * 100:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.5)
    except OSError:
        cut.append(time.monotonic() - started)
    finally:
        writer.close()


async def one_call(port: int, session: str) -> int:
    """One valid call on its own connection: the status line's code, 0 if none came."""
    body = json.dumps(pre_tool_use(session=session)).encode()
    head = (
        f"POST /hook/claude-code HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + body)
        line = await asyncio.wait_for(reader.readline(), 60)
        writer.close()
    except (OSError, asyncio.TimeoutError):
        return 0
    return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else 0


def test_slow_clients_hold_only_their_own_connections(service: Service) -> None:
    async def attack() -> tuple[list[int], list[int], list[float]]:
        cut: list[float] = []
        slow = [asyncio.create_task(trickle(service.port, cut)) for _ in range(300)]
        await asyncio.sleep(1.5)  # all 300 connected, none has sent a whole head
        sequential = [await one_call(service.port, f"seq-{n}") for n in range(40)]
        burst = await asyncio.gather(*(one_call(service.port, f"b-{n}") for n in range(300)))
        await asyncio.gather(*slow)
        return sequential, list(burst), cut

    sequential, burst, cut = asyncio.run(attack())
    assert sequential == [200] * 40
    assert burst == [200] * 300
    assert len(cut) == 300 and max(cut) < 15  # each cut off at its head's deadline (10 s)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_headers_are_bounded_before_the_token(service: Service) -> None:
    """10 clients without a token, each sending 99 header lines of 64,000 bytes: each is
    answered 431 and cut off within the first 16 KiB, and the guard's memory stays put."""
    before = rss_mb(service.process.pid)
    line = b"X-Fat: " + b"f" * 64_000 + b"\r\n"

    def fat() -> tuple[bytes, int]:
        sent = 0
        with socket.create_connection(("127.0.0.1", service.port), timeout=30) as client:
            try:
                client.sendall(b"POST /hook/claude-code HTTP/1.1\r\n")
                for _ in range(99):
                    client.sendall(line)
                    sent += 1
            except OSError:
                pass
            try:
                return client.recv(65536), sent
            except OSError:
                return b"", sent

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: fat(), range(10)))
    assert all(sent < 99 for _, sent in results)  # none could send it all
    assert all(answer.startswith(b"HTTP/1.1 431") for answer, _ in results if answer)
    assert rss_mb(service.process.pid) - before < 20
    assert service.request("GET", "/healthz")[0] == 200


def exchange(port: int, data: bytes) -> bytes:
    """Everything the service answers to `data` on one connection, until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(data)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                answer += chunk
        return answer


def test_framing_that_could_hide_a_second_request(service: Service) -> None:
    auth = f"Host: 127.0.0.1:{service.port}\r\nAuthorization: Bearer {TOKEN}\r\n"
    hidden = f"GET /api/agents HTTP/1.1\r\n{auth}\r\n".encode()
    cases = {
        "two Content-Lengths": f"POST /hook/claude-code HTTP/1.1\r\n{auth}"
        f"Content-Length: 2\r\nContent-Length: {len(hidden) + 2}\r\n\r\n{{}}".encode()
        + hidden,
        "a GET with a body": f"GET /healthz HTTP/1.1\r\n{auth}"
        f"Content-Length: {len(hidden)}\r\n\r\n".encode()
        + hidden,
        "a folded header": f"GET /healthz HTTP/1.1\r\n{auth}X-A: 1\r\n  folded\r\n\r\n".encode()
        + hidden,
        "a malformed request line": b"GARBAGE\r\n\r\n" + hidden,
    }
    for what, data in cases.items():
        answer = exchange(service.port, data)
        assert answer.startswith(b"HTTP/1.1 400 "), (what, answer[:200])
        assert answer.count(b"HTTP/1.1 ") == 1, what  # the hidden request was not served
        assert b"X-Content-Type-Options: nosniff" in answer, what
    head_too_big = b"GET / HTTP/1.1\r\nX-A: " + b"a" * 20000 + b"\r\n\r\n"
    answer = exchange(service.port, head_too_big)
    assert answer.startswith(b"HTTP/1.1 431 ") and b"nosniff" in answer


def test_a_head_with_bare_lf_line_ends_gets_400_at_once(service: Service) -> None:
    """A head whose lines end in LF alone would otherwise wait for a CRLF CRLF that never
    comes, till the 10 s deadline."""
    auth = f"Host: 127.0.0.1:{service.port}\nAuthorization: Bearer {TOKEN}\n"
    for data in (
        f"GET /healthz HTTP/1.1\n{auth}\n".encode(),
        f"GET /healthz HTTP/1.1\r\n{auth}\r\n".encode(),  # CRLF first, then bare LFs
    ):
        began = time.monotonic()
        with socket.create_connection(("127.0.0.1", service.port), timeout=30) as client:
            client.sendall(data)  # and the connection stays open: no EOF to end the wait
            answer = client.recv(65536)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert time.monotonic() - began < 5.0


def test_under_a_1024_descriptor_limit_tokenless_connections_never_keep_the_hook_out(
    env: dict[str, str],
) -> None:
    """systemd's default limit (soft and hard 1,024, so it cannot be raised): a local
    process holding 1,100 tokenless connections; each hook call is still answered at once."""
    require(shutil.which("prlimit") is not None, "prlimit (util-linux)")
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1300:  # this test's own end of the 1,100 connections
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    cli = ["prlimit", "--nofile=1024:1024", *CLI]
    held: list[socket.socket] = []
    with Service(env, cli=cli) as limited:
        try:
            for _ in range(1100):
                held.append(socket.create_connection(("127.0.0.1", limited.port), timeout=30))
            time.sleep(1.0)  # the service has accepted (and closed) what it will
            for n in range(3):
                began = time.monotonic()
                call = pre_tool_use("Bash", {"command": f"echo {n}"})
                status, _, _ = limited.request("POST", "/hook/claude-code", call)
                assert status == 200
                assert time.monotonic() - began < 3.0
        finally:
            for connection in held:
                connection.close()
        assert "1024 file descriptors allowed" in limited.stderr()


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (0600)."""
    require(subprocess.run(["which", "openssl"], capture_output=True).returncode == 0, "openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    key.chmod(0o600)
    return cert, key


def test_tls_on_every_address_takes_the_page_own_post(tmp_path: Path, env: dict[str, str]) -> None:
    cert, key = self_signed(tmp_path)
    tls = ("--allow-remote", "--tls-cert", str(cert), "--tls-key", str(key))
    with Service(env, *tls, address="0.0.0.0:0") as service:
        import http.client

        context = ssl.create_default_context(cafile=str(cert))
        for origin, expected in [
            (f"https://127.0.0.1:{service.port}", 404),  # the page's: served (no such agent)
            (f"https://evil.example:{service.port}", 403),
        ]:
            secure = http.client.HTTPSConnection(
                "127.0.0.1", service.port, context=context, timeout=30
            )
            headers = {"Authorization": f"Bearer {TOKEN}", "Origin": origin}
            secure.request("POST", "/api/agents/nobody/reset", b"", headers)
            assert secure.getresponse().status == expected, origin
            secure.close()


def test_token_file_owner_only_never_through_a_link(tmp_path: Path, env: dict[str, str]) -> None:
    folder = tmp_path / "state" / "dsh-circuit-breaker"
    folder.mkdir(parents=True, mode=0o700)
    token_file = folder / "http-token"
    token_file.write_text("an-existing-token-0123456789\n")
    token_file.chmod(0o644)
    with Service(env, token=None) as service:
        assert service.request("GET", "/healthz", token="an-existing-token-0123456789")[0] == 200
    assert token_file.stat().st_mode & 0o777 == 0o600  # tightened, as every file of ours
    token_file.unlink()
    target = tmp_path / "elsewhere"
    target.write_text("a-secret-of-another-file-0123\n")
    token_file.symlink_to(target)
    done = subprocess.run(
        [*CLI, "serve", "--http", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "symbolic link" in done.stderr, done
    assert "a-secret-of-another-file" not in done.stdout + done.stderr


def test_a_template_that_cannot_render_every_count_fails_at_load(env: dict[str, str]) -> None:
    bad = Path(env["HOME"]) / "bad.json"
    bad.write_text(json.dumps({"denyMessage": "{count:c}", "maxCallsPerAgent": 0x110000}))
    done = subprocess.run(
        [*CLI, "serve", "--http", "0", "--config", str(bad), "--token", TOKEN],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "denyMessage" in done.stderr, done
    assert "Traceback" not in done.stderr


def test_a_session_named_like_a_subagent_is_its_own_agent(service: Service) -> None:
    same = {"command": "same"}
    session = [pre_tool_use(session="a/b", tool_input=same) for _ in range(5)]
    subagent = [pre_tool_use(session="a", agent_id="b", tool_input=same) for _ in range(5)]
    assert [service.hook(e) for e in session + subagent] == [b""] * 10  # 5 each: none a 6th
    agents = sorted(a["agent"] for a in service.json("/api/agents")["agents"])
    assert agents == ["a%2Fb", "a/b"]


def test_a_tls_key_every_user_may_read_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    cert, key = self_signed(tmp_path)
    key.chmod(0o644)
    tls = ("--allow-remote", "--tls-cert", str(cert), "--tls-key", str(key))
    done = subprocess.run(
        [*CLI, "serve", "--http", "0.0.0.0:0", *tls, "--token", TOKEN],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "readable by every user (mode 644)" in done.stderr, done
