"""Decisions per second through each state store, as ratios against baselines measured in
this same run.

    .venv/bin/python bench/store_throughput.py [--calls N] [--processes P] [--redis-url URL]

1. One process, 50 agents, the engine benchmark's realistic mix (windows full, so every
   record is at its largest): memory:// (the baseline), sqlite://, redis://.
2. P processes at once (default 8), SQLite against Redis, two ways: every process on its
   own agents (no contention), and every process on the same 8 agents (contention:
   SQLite waits for the file lock, Redis retries its optimistic transaction).

Without --redis-url it starts Debian's redis-server on 127.0.0.1 on a free port in a
temporary directory (no persistence: the store's cost, not the disk's) and stops it
after. The SQLite store is measured when stores/sqlite.py is present.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dsh_circuit_breaker import CircuitBreaker, Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import realistic_mix

HAVE_SQLITE = importlib.util.find_spec("dsh_circuit_breaker.core.stores.sqlite") is not None
CONFIG = Config(max_calls_per_agent=0, store_timeout=30.0)  # no cap: measure steady state


@contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    directory = tempfile.mkdtemp(prefix="dshcb-bench-")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", directory,
            "--save", "", "--appendonly", "no", "--daemonize", "no"]  # fmt: skip
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def fresh(url: str) -> str:
    """The same store with no agents yet (a new prefix or a new file)."""
    if url.startswith("redis"):
        return f"{url}?prefix=bench-{uuid.uuid4().hex[:8]}:"
    if url.startswith("sqlite"):
        return f"sqlite:///{tempfile.mkdtemp(prefix='dshcb-bench-')}/state.db"
    return url


def one_process(url: str, calls: list[tuple[str, str, dict[str, Any]]]) -> float:
    breaker = CircuitBreaker(CONFIG, state=url)
    check = breaker.check
    for agent, tool, args in calls[:500]:  # warm up: connect, create the file
        check("warm-" + agent, tool, args)
    start = time.perf_counter()
    for agent, tool, args in calls:
        check(agent, tool, args)
    elapsed = time.perf_counter() - start
    breaker.close()
    return len(calls) / elapsed


def _worker(url: str, index: int, shared: bool, n: int, barrier: Any, out: Any) -> None:
    breaker = CircuitBreaker(CONFIG, state=url)
    agents = [f"agent-{i}" for i in range(8)] if shared else [f"p{index}-{i}" for i in range(8)]
    breaker.check(agents[0], "warm", {})
    barrier.wait()
    start = time.perf_counter()
    for i in range(n):
        # Mostly new calls, some repeats: a realistic share of writes that change state.
        breaker.check(agents[i % 8], "bash", {"command": f"step {index}-{i // 3}"})
    out.put(time.perf_counter() - start)
    breaker.close()


def many_processes(url: str, processes: int, n: int, shared: bool) -> float:
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes)
    out = context.Queue()
    workers = [
        context.Process(target=_worker, args=(url, i, shared, n, barrier, out))
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    times = [out.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    return processes * n / max(times)  # aggregate: all decisions over the slowest worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--redis-url", help="an existing server (default: start one)")
    args = parser.parse_args()

    with redis_server() if args.redis_url is None else _given(args.redis_url) as redis_url:
        calls = realistic_mix(args.calls)
        stores = [("memory", "memory://")]
        if HAVE_SQLITE:
            stores.append(("sqlite", "sqlite:///"))
        stores.append(("redis", redis_url))

        print(f"1. one process, {args.calls:,} decisions, 50 agents, windows full")
        rates: dict[str, float] = {}
        for name, url in stores:
            rates[name] = max(one_process(fresh(url), calls) for _ in range(2))
        for name, rate in rates.items():
            ratio = rate / rates["memory"]
            print(f"   {name:<7} {rate:>10,.0f} decisions/s   {ratio:8.4f}x memory")

        per_worker = max(200, args.calls // args.processes)
        print(f"2. {args.processes} processes at once, {per_worker:,} decisions each")
        for shared in (False, True):
            label = "same 8 agents (contended)" if shared else "own agents (no contention)"
            results = {}
            for name, url in stores[1:]:
                results[name] = many_processes(fresh(url), args.processes, per_worker, shared)
            line = "   ".join(f"{name} {rate:>9,.0f}/s" for name, rate in results.items())
            extra = ""
            if "sqlite" in results:
                extra = f"   redis/sqlite {results['redis'] / results['sqlite']:.2f}x"
            print(f"   {label:<27} {line}{extra}")


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    main()
