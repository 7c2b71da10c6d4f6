"""Round trips to Redis and client CPU time per decision, counted rather than timed, so a
busy machine does not blur them (store_throughput.py has the wall-clock rates):

    .venv/bin/python bench/redis_round_trips.py [--calls N] [--redis-url URL]

1. one process, 50 agents (the engine benchmark's mix): a resident process decides on
   agents whose record it wrote last, one compare-and-set each;
2. 8 processes on their own agents: the same, in parallel;
3. 8 processes on the same 8 agents: contention, so mismatches load and decide again.

Counts calls of RedisStore._round_trip (one write, then its replies read) in each process.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import uuid
from contextlib import nullcontext
from typing import Any

from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.stores import redis as redis_store

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import realistic_mix
from store_throughput import redis_server

CONFIG = Config(max_calls_per_agent=0, store_timeout=30.0)
Calls = list[tuple[str, str, dict[str, Any]]]


def _count_round_trips() -> list[int]:
    count = [0]
    original = redis_store.RedisStore._round_trip

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(self, *args, **kwargs)

    redis_store.RedisStore._round_trip = counted  # type: ignore[method-assign]
    return count


def _worker(url: str, calls: Calls, rename: str | None, out: Any) -> None:
    count = _count_round_trips()
    breaker = CircuitBreaker(CONFIG, state=url)
    started = time.process_time()
    for agent, tool, args in calls:
        breaker.check(f"{rename}-{agent}" if rename else agent, tool, args)
    out.put((count[0], len(calls), time.process_time() - started))
    breaker.close()


def measure(url: str, calls: Calls, processes: int, shared: bool) -> tuple[float, float]:
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    workers = []
    for i in range(processes):
        mine = calls[i::processes]
        if shared:  # every process on the same 8 agents
            mine = [(f"shared-{int(a.split('-')[1]) % 8}", t, x) for a, t, x in mine]
        rename = None if shared or processes == 1 else f"p{i}"
        workers.append(context.Process(target=_worker, args=(url, mine, rename, out)))
    for worker in workers:
        worker.start()
    results = [out.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    trips, decisions, cpu = (sum(r[i] for r in results) for i in range(3))
    return trips / decisions, cpu / decisions * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--redis-url", help="an existing server (default: start one)")
    args = parser.parse_args()
    calls = realistic_mix(args.calls)
    cases = [("one process, 50 agents", 1, False), ("8 processes, own agents", 8, False),
             ("8 processes, the same 8 agents", 8, True)]  # fmt: skip
    with redis_server() if args.redis_url is None else nullcontext(args.redis_url) as url:
        print(f"{'case':<32} {'round trips/decision':>20} {'client CPU/decision':>20}")
        for name, processes, shared in cases:
            prefixed = f"{url}?prefix=rt-{uuid.uuid4().hex[:8]}:"
            trips, cpu = measure(prefixed, calls, processes, shared)
            print(f"{name:<32} {trips:>20.2f} {cpu:>17.0f} us")


if __name__ == "__main__":
    main()
