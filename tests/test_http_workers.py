"""The HTTP guard's worker threads (`guard.workers`) and what they are for:

- answers and errors reach the request that asked, and answers finished while the loop
  is busy wake it once, not once each;
- concurrent requests share one SQLite commit (the store's group commit, fed by the
  workers), each answer sent only once its decision is committed;
- under load, the guard's decisions and command hooks' on one agent add up exactly.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.guard.http import WORKERS, GuardHTTPServer
from dsh_circuit_breaker.guard.service import Guard
from dsh_circuit_breaker.guard.workers import Workers
from hook_support import hook_env, pre_tool_use, run_hook
from support.guard_service import TOKEN, Service

pytestmark = pytest.mark.timeout(120)


def test_answers_and_errors_reach_their_requests() -> None:
    def work(n: int) -> int:
        if n == 3:
            raise ValueError("three")
        return n * n

    async def main() -> list[Any]:
        workers = Workers(4, "test")
        try:
            futures = [workers.submit(work, n) for n in range(6)]
            return await asyncio.gather(*futures, return_exceptions=True)
        finally:
            workers.shutdown()

    got = asyncio.run(main())
    assert [g if not isinstance(g, ValueError) else "error" for g in got] == [
        0,
        1,
        4,
        "error",
        16,
        25,
    ]


def test_answers_finished_while_the_loop_is_busy_wake_it_once() -> None:
    gate = threading.Event()
    finished: list[int] = []

    def work(n: int) -> int:
        gate.wait(10)
        finished.append(n)
        return n

    async def main() -> tuple[list[int], int]:
        workers = Workers(4, "test")
        deliveries = 0
        deliver = workers._deliver

        def counted() -> None:
            nonlocal deliveries
            deliveries += 1
            deliver()

        workers._deliver = counted  # type: ignore[method-assign]
        try:
            futures = [workers.submit(work, n) for n in range(4)]
            gate.set()
            deadline = time.monotonic() + 10
            while len(finished) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)  # the loop itself blocked: every answer comes meanwhile
            time.sleep(0.05)  # the last one's hand-off, after its append
            return await asyncio.gather(*futures), deliveries
        finally:
            workers.shutdown()

    answers, deliveries = asyncio.run(main())
    assert answers == [0, 1, 2, 3]
    assert deliveries == 1


def test_an_answer_for_a_request_gone_is_dropped() -> None:
    gate = threading.Event()
    errors: list[dict[str, Any]] = []

    async def main() -> int:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
        workers = Workers(1, "test")
        try:
            gone = workers.submit(lambda _: gate.wait(10), None)
            gone.cancel()  # its connection closed while it was being decided
            after = workers.submit(lambda n: n + 1, 41)
            gate.set()
            return await after
        finally:
            workers.shutdown()

    assert asyncio.run(main()) == 42
    assert errors == []


def post(port: int, event: dict[str, Any]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        connection.request("POST", "/hook/claude-code", json.dumps(event), headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_concurrent_requests_share_one_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in hook_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    guard = Guard(None, f"sqlite:///{tmp_path}/state.db")
    assert guard.open() is None
    store = guard.store.store  # the SQLite store inside the counting wrapper
    batches: list[int] = []
    run = store._run

    def counted(batch: list[Any]) -> None:
        batches.append(len(batch))
        run(batch)

    monkeypatch.setattr(store, "_run", counted)
    server = GuardHTTPServer(("127.0.0.1", 0), guard, TOKEN)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    many = WORKERS
    answers: list[tuple[int, bytes]] = []
    try:
        # The store busy (as while another process commits): every request's decision
        # queues, and the first worker to get the store commits them all at once.
        with store._lock:
            clients = [
                threading.Thread(
                    target=lambda n=n: answers.append(
                        post(server.port, pre_tool_use(session=f"a{n}", tool_input={"n": n}))
                    )
                )
                for n in range(many)
            ]
            for client in clients:
                client.start()
            deadline = time.monotonic() + 30
            while len(store._queue) < many and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.1)
            assert answers == []  # nothing is answered before its decision commits
        for client in clients:
            client.join(30)
    finally:
        server.shutdown()
        serving.join(10)
        server.server_close()
    assert answers == [(200, b"")] * many
    assert batches == [many]
    rows = {agent: state for agent, state in guard.store.agents()}
    assert sorted(rows) == sorted(f"a{n}" for n in range(many))
    guard.close()


def test_guard_and_command_hooks_under_load_count_one_agent_exactly(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    clients, calls, hooks = 16, 12, 6  # 198 calls, under the default cap of 300
    errors: list[str] = []
    with Service(env) as service:

        def client(n: int) -> None:
            connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
            try:
                for i in range(calls):
                    event = pre_tool_use(session="shared", tool_input={"command": f"c{n}-{i}"})
                    headers = {"Authorization": f"Bearer {TOKEN}"}
                    connection.request("POST", "/hook/claude-code", json.dumps(event), headers)
                    response = connection.getresponse()
                    body = response.read()
                    if (response.status, body) != (200, b""):
                        errors.append(f"{response.status} {body!r}")
            except Exception as exc:
                errors.append(repr(exc))
            finally:
                connection.close()

        def hook(n: int) -> None:
            event = pre_tool_use(session="shared", tool_input={"command": f"hook-{n}"})
            done = run_hook(event, env)
            if done.returncode or done.stdout:
                errors.append(f"hook: {done.returncode} {done.stdout!r} {done.stderr!r}")

        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        threads += [threading.Thread(target=hook, args=(n,)) for n in range(hooks)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        (agent,) = service.json("/api/agents")["agents"]
        assert (agent["agent"], agent["calls"]) == ("shared", clients * calls + hooks)
