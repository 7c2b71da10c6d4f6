"""The HTTP guard (`serve --http`), a real process on 127.0.0.1 driven over real sockets:

- every harness's captured probe answered byte for byte as `hook --harness NAME` prints it;
- /metrics parsed by Prometheus' own parser, its counters equal to the decisions made;
- the command hook, a restarted service and the service share one SQLite store exactly;
- refused: no token, a wrong one, a foreign Origin or Host, an oversized or chunked body;
- 32 concurrent clients and a slow client: counts stay exact, the slow one is cut off;
- non-loopback addresses need --allow-remote and TLS; the token file is owner-only.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import socket
import ssl
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.harnesses import HARNESSES
from hook_support import hook_env, pre_tool_use, prompt_submit, run_hook
from support.guard_service import CLI, TOKEN, Service, metric_samples, state_dir

FIXTURES = Path(__file__).parent / "fixtures" / "harness-events"
NAMES = sorted(HARNESSES)  # every command-hook harness has its captured probe there
# Services started and stopped, 32 clients, a client cut off after 10 s: room under load.
pytestmark = pytest.mark.timeout(120)


def probe(name: str) -> list[dict[str, Any]]:
    text = (FIXTURES / name / "probe.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return hook_env(tmp_path)


@pytest.fixture
def service(env: dict[str, str]) -> Any:
    with Service(env) as running:
        yield running


@pytest.mark.parametrize("name", NAMES)
def test_answers_are_what_the_command_hook_prints(tmp_path: Path, name: str) -> None:
    events = probe(name)
    hook_home = tmp_path / "hook"
    hook_home.mkdir()
    hook_env_ = hook_env(hook_home)
    printed = []
    with Service(hook_env(tmp_path)) as service:
        for event in events:
            done = run_hook(event, hook_env_, "--harness", name)
            assert done.returncode == 0 and done.stderr == ""
            printed.append(done.stdout.rstrip("\n"))
            assert service.hook(event, name).decode() == printed[-1]
    assert any(printed), "the probe repeats its call past the limit: some are denied"


def test_metrics_parse_and_count_the_decisions(service: Service) -> None:
    for _ in range(10):  # 5 run, 5 denied, the last 3 of them stops (stopAfterDenials 3)
        service.hook(pre_tool_use(session="m1", tool_input={"command": "echo same"}))
    service.hook(pre_tool_use(session="m2", tool_input={"command": "echo other"}))
    service.hook(pre_tool_use(session="m2", tool="TodoWrite", tool_input={"todos": []}))
    service.hook(prompt_submit(session="m2"))
    service.hook(pre_tool_use(session="m3"), "codex")
    status, _, _ = service.request("POST", "/hook/claude-code", b"not json")
    assert status == 200
    service.request("GET", "/healthz", auth=False)
    samples = metric_samples(service.metrics())
    decisions = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "dsh_circuit_breaker_decisions_total"
    }
    assert decisions == {
        (("harness", "claude-code"), ("kind", "allow")): 6,
        (("harness", "claude-code"), ("kind", "duplicate")): 5,
        (("harness", "codex"), ("kind", "allow")): 1,
    }
    assert samples[("dsh_circuit_breaker_denials_total", (("harness", "claude-code"),))] == 5
    assert samples[("dsh_circuit_breaker_stops_total", (("harness", "claude-code"),))] == 3
    assert samples[("dsh_circuit_breaker_prompts_total", (("harness", "claude-code"),))] == 1
    malformed = ("dsh_circuit_breaker_malformed_events_total", (("harness", "claude-code"),))
    assert samples[malformed] == 1
    assert samples[("dsh_circuit_breaker_agents_tracked", ())] == 2  # m2's prompt reset it
    assert samples[("dsh_circuit_breaker_http_refused_total", (("reason", "token"),))] == 1
    assert samples[("dsh_circuit_breaker_store_errors_total", ())] == 0
    # Twelve judged calls and one prompt are in the latency histogram.
    assert samples[("dsh_circuit_breaker_decision_seconds_count", ())] == 13
    assert samples[("dsh_circuit_breaker_decision_seconds_bucket", (("le", "+Inf"),))] == 13
    assert 0 < samples[("dsh_circuit_breaker_decision_seconds_sum", ())] < 13


def test_store_is_shared_with_command_hooks_and_restarts(
    tmp_path: Path, env: dict[str, str]
) -> None:
    event = pre_tool_use(session="shared", tool_input={"command": "make"})
    with Service(env) as service:
        assert [service.hook(event) for _ in range(2)] == [b""] * 2
    for _ in range(2):  # command hooks in between, on the same default SQLite file
        assert run_hook(event, env).stdout == ""
    with Service(env) as restarted:
        assert restarted.hook(event) == b""  # the fifth
        denied = json.loads(restarted.hook(event))  # the sixth, refused
        reason = denied["hookSpecificOutput"]["permissionDecisionReason"]
        assert "(copies: 6, limit: 6)" in reason
        (agent,) = restarted.json("/api/agents")["agents"]
        assert (agent["agent"], agent["calls"], agent["status"]) == ("shared", 5, "denied")
    assert "permissionDecision" in run_hook(event, env).stdout  # and the hook sees it too


def test_a_stopped_agent_through_the_api(service: Service) -> None:
    event = pre_tool_use(session="stuck", tool_input={"command": "loop"})
    answers = [service.hook(event) for _ in range(8)]  # the 6th refused, the 8th a stop
    assert answers[:5] == [b""] * 5 and all(answers[5:])
    (agent,) = service.json("/api/agents")["agents"]
    assert (agent["status"], agent["denialsInARow"], agent["tripped"]) == (
        "stopped",
        3,
        ["duplicate", "stop"],
    )
    timeline = service.json("/api/agents/stuck")["timeline"]
    assert [e["stop"] for e in timeline] == [False] * 7 + [True]
    kinds = [i["kind"] for i in service.json("/api/incidents")["incidents"]]
    assert kinds == ["duplicate", "stop"]


def test_reset_and_incidents_through_the_api(service: Service) -> None:
    event = pre_tool_use(session="sess", agent_id="sub-1", tool_input={"command": "loop"})
    for _ in range(6):
        service.hook(event)
    agents = service.json("/api/agents")["agents"]
    assert [(a["session"], a["subagent"], a["harness"], a["denials"]) for a in agents] == [
        ("sess", "sub-1", "claude-code", 1)
    ]
    detail = service.json("/api/agents/sess%2Fsub-1")
    assert [e["allowed"] for e in detail["timeline"]] == [True] * 5 + [False]
    first = service.json("/api/incidents")
    (incident,) = first["incidents"]
    assert (incident["kind"], incident["agent"], incident["count"]) == (
        "duplicate",
        "sess/sub-1",
        6,
    )
    assert service.json(f"/api/incidents?after={first['offset']}")["incidents"] == []
    status, body, _ = service.request("POST", "/api/agents/sess%2Fsub-1/reset")
    assert status == 200 and json.loads(body)["before"]["calls"] == 5
    assert service.hook(event) == b""  # afresh
    status, body, _ = service.request("POST", "/api/agents/nobody/reset")
    assert status == 404
    samples = metric_samples(service.metrics())
    assert samples[("dsh_circuit_breaker_resets_total", ())] == 1


def test_refused_requests(service: Service) -> None:
    event = json.dumps(pre_tool_use()).encode()
    cases = [
        ("no token", "POST", "/hook/claude-code", event, {}, False, 401),
        (
            "wrong token",
            "POST",
            "/hook/claude-code",
            event,
            {"Authorization": "Bearer x" * 3},
            False,
            401,
        ),
        ("token in the query", "GET", f"/api/agents?token={TOKEN}", None, {}, False, 401),
        ("page without token", "GET", "/", None, {}, False, 401),
        ("metrics without token", "GET", "/metrics", None, {}, False, 401),
        (
            "foreign origin",
            "POST",
            "/api/agents/x/reset",
            b"",
            {"Origin": "http://evil.example"},
            True,
            403,
        ),
        (
            "same-site page",
            "POST",
            "/hook/claude-code",
            event,
            {"Sec-Fetch-Site": "same-site"},
            True,
            403,
        ),
        ("rebinding host", "GET", "/api/agents", None, {"Host": "evil.example"}, True, 421),
        ("unknown harness", "POST", "/hook/nope", event, {}, True, 404),
    ]
    for what, method, path, body, headers, auth, expected in cases:
        status, answer, sent = service.request(method, path, body, headers, auth=auth)
        assert status == expected, (what, status, answer)
        assert sent["X-Content-Type-Options"] == "nosniff"
    assert service.request("GET", "/api/agents")[0] == 200  # still up, still answering
    own_origin = {"Origin": service.origin, "Sec-Fetch-Site": "same-origin"}
    assert service.request("POST", "/hook/claude-code", event, own_origin)[0] == 200


def raw_request(port: int, head: bytes, body_bytes: int = 0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(head)
        if body_bytes:  # the service may close before taking it all: that is the point
            with contextlib.suppress(OSError):
                connection.sendall(b"x" * body_bytes)
        data = b""
        while chunk := connection.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data:
                break
        return data


def test_oversized_and_chunked_bodies_are_refused_unread(service: Service) -> None:
    auth = f"Authorization: Bearer {TOKEN}\r\nHost: 127.0.0.1:{service.port}\r\n"
    big = f"POST /hook/claude-code HTTP/1.1\r\n{auth}Content-Length: {17 * 1024 * 1024}\r\n\r\n"
    started = time.monotonic()
    assert raw_request(service.port, big.encode(), 1024 * 1024).startswith(b"HTTP/1.1 413")
    assert time.monotonic() - started < 5  # answered without reading 17 MiB
    api = f"POST /api/agents/x/reset HTTP/1.1\r\n{auth}Content-Length: {65 * 1024}\r\n\r\n"
    assert raw_request(service.port, api.encode()).startswith(b"HTTP/1.1 413")
    chunked = f"POST /hook/claude-code HTTP/1.1\r\n{auth}Transfer-Encoding: chunked\r\n\r\n"
    assert raw_request(service.port, chunked.encode()).startswith(b"HTTP/1.1 411")
    samples = metric_samples(service.metrics())
    assert samples[("dsh_circuit_breaker_http_refused_total", (("reason", "too_large"),))] == 2


def test_32_concurrent_clients_and_a_slow_one(service: Service) -> None:
    # A slow client: headers trickling in a byte every half second, for ever.
    slow = socket.create_connection(("127.0.0.1", service.port), timeout=30)
    slow_done: list[float] = []

    def trickle() -> None:
        started = time.monotonic()
        try:
            for byte in b"POST /hook/claude-code HTTP/1.1\r\nX-Pad: " + b"a" * 100:
                slow.sendall(bytes([byte]))
                time.sleep(0.5)
        except OSError:
            pass
        slow_done.append(time.monotonic() - started)

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    errors: list[str] = []
    answers: dict[int, list[bool]] = {}

    def client(n: int) -> None:
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
        got = []
        try:
            for i in range(20):
                # Ten calls of its own agent, then ten of one agent all clients share.
                session = f"client-{n}" if i < 10 else "everyone"
                event = pre_tool_use(session=session, tool_input={"command": "same"})
                headers = {"Authorization": f"Bearer {TOKEN}"}
                connection.request("POST", "/hook/claude-code", json.dumps(event), headers)
                response = connection.getresponse()
                body = response.read()
                if response.status != 200:
                    errors.append(f"{response.status} {body!r}")
                got.append(body == b"")
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connection.close()
        answers[n] = got

    threads = [threading.Thread(target=client, args=(n,)) for n in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    for n in range(32):
        assert answers[n][:10] == [True] * 5 + [False] * 5  # exact per agent
    assert sum(sum(a[10:]) for a in answers.values()) == 5  # exactly 5 of 320 shared calls
    trickler.join(30)
    assert slow_done and slow_done[0] < 15  # cut off after HEAD_SECONDS, not served
    slow.close()
    samples = metric_samples(service.metrics())
    assert samples[("dsh_circuit_breaker_http_refused_total", (("reason", "slow"),))] >= 1
    total = sum(
        v for (name, _), v in samples.items() if name == "dsh_circuit_breaker_decisions_total"
    )
    assert total == 32 * 20
    assert service.request("GET", "/healthz")[0] == 200


def test_the_page_is_served_with_the_token_only(service: Service) -> None:
    status, body, headers = service.request("GET", f"/?token={TOKEN}", auth=False)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    policy = headers["Content-Security-Policy"]
    nonce = policy.split("'nonce-")[1].split("'")[0]
    page = body.decode()
    assert f'<script nonce="{nonce}">' in page and "{{" not in page
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert service.page_line.strip() == f"the live page: {service.origin}/?token={TOKEN}"


def test_token_file_is_created_owner_only(tmp_path: Path, env: dict[str, str]) -> None:
    with Service(env, token=None) as service:
        token_file = state_dir(tmp_path) / "http-token"
        token = token_file.read_text().strip()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        assert len(token) >= 32
        assert service.request("GET", "/healthz", token=token)[0] == 200
        assert service.request("GET", "/healthz", token=TOKEN)[0] == 401
    with Service(dict(env, DSH_CIRCUIT_BREAKER_TOKEN="from-the-environment-123"), token=None) as s:
        assert s.request("GET", "/healthz", token="from-the-environment-123")[0] == 200
    assert token_file.read_text().strip() == token  # kept across starts


def serve_fails(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [*CLI, "serve", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done
    return done.stderr


def test_bad_addresses_and_options_fail_at_start(env: dict[str, str]) -> None:
    assert "not a loopback address" in serve_fails(env, "--http", "0.0.0.0:0", "--token", TOKEN)
    assert "needs --tls-cert and --tls-key" in serve_fails(
        env, "--http", "0.0.0.0:0", "--allow-remote", "--token", TOKEN
    )
    assert "16 to 512 characters" in serve_fails(env, "--http", "0", "--token", "short")
    assert "port must be a number" in serve_fails(env, "--http", "127.0.0.1:http")
    bad = Path(env["HOME"]) / "bad.json"
    bad.write_text('{"duplicateLimit": 1}')
    assert "duplicateLimit" in serve_fails(env, "--http", "0", "--config", str(bad))


def test_remote_with_tls(tmp_path: Path, env: dict[str, str]) -> None:
    require(subprocess.run(["which", "openssl"], capture_output=True).returncode == 0, "openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    tls = ("--allow-remote", "--tls-cert", str(cert), "--tls-key", str(key))
    with Service(env, *tls, address="0.0.0.0:0") as service:
        assert service.origin.startswith("https://")
        context = ssl.create_default_context(cafile=str(cert))
        import http.client

        secure = http.client.HTTPSConnection("127.0.0.1", service.port, context=context, timeout=30)
        secure.request("POST", "/hook/claude-code", json.dumps(pre_tool_use()),
                       {"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert secure.getresponse().status == 200
        secure.close()
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            plain = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
            plain.request("GET", "/healthz", headers={"Authorization": f"Bearer {TOKEN}"})
            answer = plain.getresponse()
            answer.read()
            if answer.status:  # a TLS server answering plain HTTP with a 400 is fine too
                raise ConnectionError(f"plain HTTP got {answer.status}")


def on_a_terminal(command: list[str], env: dict[str, str]) -> str:
    """What `command` prints with its stdout on a pseudo-terminal, as a person sees it."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(command, env=env, stdout=slave, stderr=subprocess.DEVNULL)
        os.close(slave)
        seen = b""
        while True:
            ready, _, _ = select.select([master], [], [], 30)
            try:
                chunk = os.read(master, 4096) if ready else b""
            except OSError:  # the terminal closed: the process exited
                chunk = b""
            if not chunk:
                break
            seen += chunk
        assert proc.wait(30) == 0
    finally:
        os.close(master)
    return seen.decode().replace("\r\n", "\n")


def test_ensure_starts_the_service_once(tmp_path: Path, env: dict[str, str]) -> None:
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    ensure = [*CLI, "serve", "--http", f"127.0.0.1:{port}", "--ensure"]
    first = subprocess.run(ensure, env=env, capture_output=True, text=True, timeout=60)
    assert (first.returncode, first.stdout, first.stderr) == (0, "", "")
    token = (state_dir(tmp_path) / "http-token").read_text().strip()
    from dsh_circuit_breaker.guard.ensure import health

    answer = health(f"http://127.0.0.1:{port}", token)
    assert isinstance(answer, dict)
    try:
        started = time.monotonic()
        again = subprocess.run(ensure, env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and time.monotonic() - started < 5
        # A person at a terminal gets the page's address, token and all (a hook: nothing).
        shown = on_a_terminal(ensure, env)
        page = f"  the live page: http://127.0.0.1:{port}/?token={token}"
        assert shown.splitlines()[-2:] == [f"the guard answers on http://127.0.0.1:{port}", page]
        other = dict(env, DSH_CIRCUIT_BREAKER_TOKEN="another-token-0123456789")
        refused = subprocess.run(ensure, env=other, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "cannot prove it holds this token" in refused.stderr
        log = state_dir(tmp_path) / "http-guard.log"
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        assert f"guarding on http://127.0.0.1:{port}" in log.read_text()
        stop = [*CLI, "serve", "--http", f"127.0.0.1:{port}", "--stop"]
        stopped = subprocess.run(stop, env=env, capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0 and f"pid {answer['pid']}" in stopped.stdout
        assert health(f"http://127.0.0.1:{port}", token) is None
        # "stopped" once it has exited (gone, or a zombie nobody reaped), not before.
        proc = Path(f"/proc/{answer['pid']}/stat")
        assert not proc.exists() or proc.read_text().rsplit(")", 1)[1].split()[0] == "Z"
        again = subprocess.run(stop, env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "no guard answers" in again.stdout
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(answer["pid"], 15)


def test_serve_stdio_still_answers(env: dict[str, str]) -> None:
    done = subprocess.run(
        [*CLI, "serve", "--stdio"],
        input=b'{"op": "ping", "id": 1}\n',
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0 and json.loads(done.stdout) == {"ok": True, "id": 1}
    both = subprocess.run(
        [*CLI, "serve", "--stdio", "--http", "0"], env=env, capture_output=True, timeout=60
    )
    assert both.returncode == 2 and b"not allowed with argument" in both.stderr


def test_two_guards_on_one_redis_are_one_breaker(tmp_path: Path) -> None:
    """A fleet: two guard processes (as on two machines) and a command hook on one Redis
    store; 2 x 16 clients making the same call for one agent run it exactly 5 times."""
    from conftest import STORE_URLS

    url = STORE_URLS["redis"](tmp_path)
    env = hook_env(tmp_path, DSH_CIRCUIT_BREAKER_STATE=url)
    event = pre_tool_use(session="fleet", tool_input={"command": "retry"})
    assert run_hook(event, env).stdout == ""  # the command hook counts one
    allowed: list[bool] = []
    lock = threading.Lock()
    with Service(env) as one, Service(env) as two:

        def client(service: Service) -> None:
            for _ in range(5):
                ran = service.hook(event) == b""
                with lock:
                    allowed.append(ran)

        threads = [threading.Thread(target=client, args=(s,)) for s in [one, two] * 16]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert len(allowed) == 160 and sum(allowed) == 4  # five in all, with the hook's
        (agent,) = one.json("/api/agents")["agents"]
        assert agent["calls"] == 5 and agent["status"] == "stopped"  # refused 156 in a row
        assert two.json("/api/agents")["agents"][0]["calls"] == 5


@pytest.mark.parametrize("edit", ["half-written", "invalid", "deleted", "valid"])
def test_the_config_is_read_once_at_start(env: dict[str, str], tmp_path: Path, edit: str) -> None:
    """A config file edited, half-written or deleted under a running guard changes nothing:
    every harness keeps the config the guard started with (on a967c7a each harness read
    the file at its first event: a broken file made every hook a 500, which Claude Code's
    `onFailure: block` turns into a refused call, and a valid edit reached one harness and
    not another)."""
    config = tmp_path / "breaker.json"
    config.write_text('{"duplicateLimit": 3}')
    with Service(env, "--config", str(config)) as service:
        call = pre_tool_use(session="edited-1", tool_input={"command": "echo x"})
        assert service.hook(call) == b"" and service.hook(call) == b""
        if edit == "deleted":
            config.unlink()
        else:
            text = {"half-written": '{"duplicateLim', "invalid": '{"duplicateLimit": 1}'}
            config.write_text(text.get(edit, '{"duplicateLimit": 6}'))
        assert b"NOT run" in service.hook(call)  # the 3rd copy, refused at the start's limit
        for name in NAMES:  # every harness answers (no 500), at the start's limit of 3:
            refused = sum(bool(service.hook(event, name)) for event in probe(name))
            assert refused >= 7, (name, refused)  # of ~10 copies (5 at the default of 6)
        other = pre_tool_use(session="edited-2", tool_input={"command": "echo y"})
        assert [bool(service.hook(other)) for _ in range(3)] == [False, False, True]


@pytest.mark.timeout(120)
def test_big_events_at_once_are_counted_exactly_and_small_calls_go_on(service: Service) -> None:
    """Past 1 MiB an event is read in bounded memory (bounded.py), at most two at once
    (http.BIG_AT_ONCE), waiting on the loop rather than on a worker: six copies of one
    big call posted together are all answered, exactly one refused (the 6th judged), and
    a small call posted meanwhile is answered too."""
    rows = [{"a": i} for i in range(131_072)]  # about 1.3 MB of small objects
    big = pre_tool_use(session="big", tool_input={"command": "psql -f -", "rows": rows})
    answers: list[bytes] = []
    posts = [threading.Thread(target=lambda: answers.append(service.hook(big))) for _ in range(6)]
    for post in posts:
        post.start()
    small = service.hook(pre_tool_use(session="small", tool_input={"command": "ls"}))
    for post in posts:
        post.join(100)
    assert small == b""
    assert len(answers) == 6 and answers.count(b"") == 5
    assert json.loads(max(answers))["hookSpecificOutput"]["permissionDecision"] == "deny"
