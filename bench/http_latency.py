"""The HTTP guard against the command hook and a bare HTTP floor, in one run: round-trip
latency of one tool call's decision (median, p99), then decisions per second under 32
concurrent clients.

Latency, interleaved over N rounds after a warm-up, every call a new one (allowed, one
store write), on the same store (`--state`, default the SQLite file in a temp HOME):

- command hook        the command `install claude-code` writes, a new process per call,
                      the event on stdin (as Claude Code runs it)
- HTTP, keep-alive    POST /hook/claude-code on one open connection
- HTTP, new connection  a TCP connect per call as well
- floor, keep-alive   the same POST, on one open connection, to a bare asyncio HTTP server
                      in a child process (as the guard is run) that answers `{}` and does
                      nothing else: what Python's HTTP on this machine costs at the least.
                      Each HTTP row prints its ratio against it.

Then keep-alive alone: the guard's keep-alive row and the floor's, interleaved only with
each other, so no command-hook process writes the same SQLite file between two calls
(after another process commits, SQLite drops the guard connection's page cache and reads
those pages again, and starting a process takes the CPU's caches too).

Throughput: 32 clients (keep-alive connections, in 4 processes of 8 threads, so the
clients' own interpreter is not what is measured) post allowed calls of 32 agents for
`--seconds`; decisions/s is what the guard answered, checked against its /metrics. Then
the same clients against the floor server: what these clients and this machine can do
at all, and the guard's share of it.

`--taskset CPUS` pins the guard (not the clients) to those CPUs: its threads take turns
on one GIL anyway, and on a small machine turns taken across cores cost wake-ups.

    .venv/bin/python bench/http_latency.py [--rounds 200] [--seconds 5] [--state URL]
                                           [--taskset CPUS]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from _scratch import scratch_env  # bench/ is on the path when a bench runs
from dsh_circuit_breaker.core.invocation import hook_command

TOKEN = "bench-token-0123456789abcdef"
CLIENTS, PROCESSES = 32, 4
PER_AGENT = 250

# The floor: HTTP/1.1 with keep-alive and nothing else, on asyncio as the guard is.
FLOOR = r"""
import asyncio

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def connection(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main():
    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


asyncio.run(main())
"""


def event(session: str, n: int) -> bytes:
    """Call `n` (a new command each time) of agent `session`; a fresh agent every
    PER_AGENT calls, so that every call stays an allowed one (maxCallsPerAgent is 300)."""
    return json.dumps(
        {
            "session_id": f"{session}-{n // PER_AGENT}",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": f"pytest -k case_{n}", "description": "bench"},
            "tool_use_id": f"toolu_{n}",
            "cwd": "/tmp",
        }
    ).encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--state", default=None, help="state URL (default: SQLite in a temp HOME)")
    parser.add_argument(
        "--taskset", metavar="CPUS", help="run the guard under `taskset -c CPUS` (Linux)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cb-http-bench-") as tmp:
        env = scratch_env(tmp, PYTHONPYCACHEPREFIX=f"{tmp}/pycache")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if args.state:
            env["DSH_CIRCUIT_BREAKER_STATE"] = args.state
        serve = [sys.executable, "-m", "dsh_circuit_breaker.cli", "serve", "--http", "127.0.0.1:0"]
        if args.taskset:
            serve = ["taskset", "-c", args.taskset, *serve]
        with open(f"{tmp}/serve.log", "wb") as log:
            service = subprocess.Popen(
                [*serve, "--token", TOKEN], env=env, stdout=subprocess.PIPE, stderr=log
            )
        floor = subprocess.Popen([sys.executable, "-c", FLOOR], env=env, stdout=subprocess.PIPE)
        try:
            assert service.stdout is not None and floor.stdout is not None
            found = re.search(rb"guarding on http://127\.0\.0\.1:(\d+)", service.stdout.readline())
            if found is None:
                with open(f"{tmp}/serve.log") as log:
                    raise SystemExit(f"serve --http did not start: {log.read()}")
            port, floor_port = int(found.group(1)), int(floor.stdout.readline())
            latency(args, env, port, floor_port)
            throughput(args, port, floor_port)
        finally:
            for process in (service, floor):
                process.terminate()
                process.wait(10)
    return 0


def post(connection: http.client.HTTPConnection, body: bytes) -> bytes:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    connection.request("POST", "/hook/claude-code", body, headers)
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise SystemExit(f"HTTP {response.status}: {data!r}")
    return data


def latency(args: argparse.Namespace, env: dict[str, str], port: int, floor_port: int) -> None:
    hook = shlex.split(hook_command())
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    floor = http.client.HTTPConnection("127.0.0.1", floor_port, timeout=30)
    counter = iter(range(10**9))

    def command_hook() -> None:
        done = subprocess.run(hook, input=event("cmd", next(counter)), env=env, capture_output=True)
        if done.returncode or done.stdout or done.stderr:
            raise SystemExit(f"hook: {done.returncode} {done.stdout!r} {done.stderr!r}")

    def keep_alive() -> None:
        if post(kept, event("kept", next(counter))):
            raise SystemExit("denied")

    def new_connection() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            if post(connection, event("fresh", next(counter))):
                raise SystemExit("denied")
        finally:
            connection.close()

    def floor_keep_alive() -> None:
        if post(floor, event("floor", next(counter))) != b"{}":
            raise SystemExit("the floor server did not answer {}")

    hook_row, kept_row, floor_row = (
        "command hook (process per call)",
        "HTTP hook, keep-alive",
        "floor (bare asyncio), keep-alive",
    )
    cases = {
        hook_row: command_hook,
        kept_row: keep_alive,
        "HTTP hook, new connection": new_connection,
        floor_row: floor_keep_alive,
    }
    times = measure(cases, args)
    print(f"interpreter: {sys.executable} ({sys.version.split()[0]}); cores: {os.cpu_count()}")
    print(f"state: {args.state or 'sqlite (default file)'}")
    if args.taskset:
        print(f"the guard pinned to CPUs {args.taskset} (taskset)")
    print(f"latency, {args.rounds} rounds (after {args.warmup} warm-up), interleaved\n")
    print(f"{'':<34} {'median ms':>10} {'p99 ms':>8} {'/ command hook':>15} {'/ floor':>8}")
    table(times, statistics.median(times[hook_row]), statistics.median(times[floor_row]))

    alone = measure({kept_row: keep_alive, floor_row: floor_keep_alive}, args)
    print(
        f"\nkeep-alive alone (no command hook between calls), {args.rounds} rounds, interleaved\n"
    )
    print(f"{'':<34} {'median ms':>10} {'p99 ms':>8} {'':>15} {'/ floor':>8}")
    table(alone, None, statistics.median(alone[floor_row]))
    kept.close()
    floor.close()


def measure(
    cases: dict[str, Callable[[], None]], args: argparse.Namespace
) -> dict[str, list[float]]:
    """Milliseconds per call of each case, the cases taking turns round after round."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for round_ in range(args.warmup + args.rounds):
        for name, call in cases.items():
            started = time.perf_counter()
            call()
            if round_ >= args.warmup:
                times[name].append((time.perf_counter() - started) * 1000)
    for values in times.values():
        values.sort()
    return times


def table(times: dict[str, list[float]], hook: float | None, floor: float) -> None:
    for name, values in times.items():
        median = statistics.median(values)
        p99 = values[max(int(len(values) * 0.99) - 1, 0)]
        by_hook = f"{median / hook:>14.3f}x" if hook else f"{'':>15}"
        by_floor = f"{median / floor:>7.2f}x" if name.startswith("HTTP") else f"{'':>8}"
        print(f"{name:<34} {median:>10.3f} {p99:>8.3f} {by_hook} {by_floor}")


def client_process(port: int, first: int, seconds: float, start_at: float, out: Any) -> None:
    counts = [0] * (CLIENTS // PROCESSES)

    def client(i: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        agent, n = f"agent-{first + i}", 0
        while time.time() < start_at:
            time.sleep(0.001)
        while time.time() < start_at + seconds:
            post(connection, event(agent, n))
            n += 1
        counts[i] = n
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(counts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put(sum(counts))


def clients(args: argparse.Namespace, port: int) -> int:
    """CLIENTS keep-alive clients posting for `args.seconds`: how many answers they had."""
    queue: Any = multiprocessing.Queue()
    start_at = time.time() + 1.0  # every process started and connected by then
    per = CLIENTS // PROCESSES
    processes = [
        multiprocessing.Process(
            target=client_process, args=(port, p * per, args.seconds, start_at, queue)
        )
        for p in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    total = sum(queue.get(timeout=args.seconds + 60) for _ in processes)
    for process in processes:
        process.join(30)
    return int(total)


def throughput(args: argparse.Namespace, port: int, floor_port: int) -> None:
    before = decisions(port)
    total = clients(args, port)
    counted = decisions(port) - before
    if counted != total:
        raise SystemExit(f"the guard counted {counted} decisions, the clients {total}")
    if decisions(port, "denials_total"):
        raise SystemExit("the guard denied calls: every call here is to be an allowed one")
    floor = clients(args, floor_port)  # the same clients against the bare floor server
    print(
        f"\nthroughput: {CLIENTS} concurrent clients for {args.seconds:.0f} s: {total} decisions, "
        f"{total / args.seconds:.0f} decisions/s (the guard's /metrics agree)\n"
        f"the same clients against the floor: {floor / args.seconds:.0f} answers/s; "
        f"the guard answered {total / floor:.2f}x as many"
    )


def decisions(port: int, family: str = "decisions_total") -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    text = connection.getresponse().read().decode()
    connection.close()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith(f"dsh_circuit_breaker_{family}{{")
    )


if __name__ == "__main__":
    sys.exit(main())
