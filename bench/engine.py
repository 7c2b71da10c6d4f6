"""Engine speed and memory, as ratios against baselines measured in this same run.

    .venv/bin/python bench/engine.py [--calls N]

1. check() throughput on a realistic mix (bash / read_file / web_search, small arguments,
   20% exact repeats) against a floor loop: json.dumps(sort_keys) + blake2b + a dict update
   per call, the least any digest-keyed breaker must do. Target: at most 1.1x the floor.
2. Memory per agent at window=200 when every argument is 1 MiB. Target: under 64 KiB.
3. check() cost at window=20,000 against window=200. Target: within 1.2x.
4. Where check()'s time goes (`--layers`): loops that each add one of check()'s parts to the
   one before, as ratios against the floor: the key inline (the floor's work done as check()
   does it: `ignoreArgs` dropped, json's C encoder, BLAKE2b), `keys.call_key`, the rules on
   an AgentState, the memory store's transaction, then check() itself.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from hashlib import blake2b
from typing import Any

from dsh_circuit_breaker import CircuitBreaker, Config
from dsh_circuit_breaker.core.keys import call_key
from dsh_circuit_breaker.core.rules import decide
from dsh_circuit_breaker.core.state import AgentState
from dsh_circuit_breaker.core.stores import MemoryStore

Call = tuple[str, str, dict[str, Any]]


def realistic_mix(n: int, agents: int = 50, seed: int = 7) -> list[Call]:
    rng = random.Random(seed)
    recent: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    calls: list[Call] = []
    for i in range(n):
        agent = f"agent-{rng.randrange(agents)}"
        history = recent.setdefault(agent, [])
        if history and rng.random() < 0.2:
            tool, args = rng.choice(history[-10:])
            calls.append((agent, tool, dict(args)))  # an equal copy, as a harness would pass
            continue
        kind = rng.randrange(3)
        if kind == 0:
            tool, args = "bash", {"command": f"grep -rn item{i} src/", "description": f"look {i}"}
        elif kind == 1:
            tool, args = "read_file", {"path": f"src/module_{i % 977}.py", "offset": i % 50}
        else:
            tool, args = "web_search", {"query": f"python asyncio cancel scope {i}", "top_k": 5}
        history.append((tool, args))
        calls.append((agent, tool, args))
    return calls


def floor_loop(calls: list[Call]) -> float:
    seen: dict[bytes, int] = {}
    start = time.perf_counter()
    for _agent, tool, args in calls:
        text = json.dumps(args, sort_keys=True)
        key = blake2b(f"{tool}\x00{text}".encode(), digest_size=16).digest()
        seen[key] = seen.get(key, 0) + 1
    return time.perf_counter() - start


def check_loop(calls: list[Call], config: Config) -> float:
    breaker = CircuitBreaker(config)
    check = breaker.check
    start = time.perf_counter()
    for agent, tool, args in calls:
        check(agent, tool, args)
    return time.perf_counter() - start


def best_of(repeats: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(repeats))


def throughput(n: int) -> None:
    calls = realistic_mix(n)
    config = Config(max_calls_per_agent=0)
    ratios = []
    for _ in range(5):  # interleaved, so machine noise hits both sides alike
        floor = floor_loop(calls)
        ours = check_loop(calls, config)
        ratios.append(ours / floor)
    floor = best_of(3, lambda: floor_loop(calls))
    ours = best_of(3, lambda: check_loop(calls, config))
    print(f"1. throughput over {n:,} calls (50 agents, 20% exact repeats)")
    print(f"   floor (dumps + blake2b + dict): {n / floor:>12,.0f} calls/s")
    print(f"   CircuitBreaker.check():         {n / ours:>12,.0f} calls/s")
    print(f"   ratio check/floor: median {statistics.median(ratios):.2f}x (target <= 1.1x)")


def memory_per_agent(agents: int = 4, window: int = 200) -> None:
    big = "x" * (1 << 20)
    config = Config(window=window, max_calls_per_agent=0)
    breaker = CircuitBreaker(config)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for a in range(agents):
        for i in range(window + 10):
            args = {"content": big[:-12] + f"{a:04d}{i:08d}", "path": f"f{i}"}
            breaker.check(f"agent-{a}", "write_file", args)
            del args
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per_agent = (after - before) / agents
    print(f"2. memory per agent at window={window}, 1 MiB arguments")
    print(f"   {per_agent / 1024:.1f} KiB per agent (target < 64 KiB)")


def window_scaling(n: int) -> None:
    def steady(window: int) -> float:
        config = Config(window=window, duplicate_limit=6, max_calls_per_agent=0)
        breaker = CircuitBreaker(config)
        # Fill the window so every measured call also evicts.
        for i in range(window):
            breaker.check("a", "bash", {"command": f"fill {i}"})
        calls = [{"command": f"cmd {i % (window * 2)}"} for i in range(n)]
        start = time.perf_counter()
        for args in calls:
            breaker.check("a", "bash", args)
        return time.perf_counter() - start

    ratios = [steady(20_000) / steady(200) for _ in range(5)]
    print(f"3. check() cost at window=20,000 vs window=200 ({n:,} calls, full windows)")
    print(f"   ratio: median {statistics.median(ratios):.2f}x (target within 1.2x)")


def layers(n: int) -> None:
    import _json

    calls = realistic_mix(n)
    config = Config(max_calls_per_agent=0)
    ignore = frozenset(config.ignore_args)
    encode = _json.make_encoder(
        {}, None, _json.encode_basestring_ascii, None, ":", ",", True, False, True
    )

    def key_inline(calls: list[Call]) -> float:
        seen: dict[bytes, int] = {}
        start = time.perf_counter()
        for _agent, tool, args in calls:
            if not ignore.isdisjoint(args):
                args = {k: v for k, v in args.items() if k not in ignore}
            text = "".join(encode(args, 0))
            key = blake2b(f"{tool}\x00{text}".encode(), digest_size=16).digest()
            seen[key] = seen.get(key, 0) + 1
        return time.perf_counter() - start

    def keyed(calls: list[Call]) -> float:
        seen: dict[bytes | None, int] = {}
        start = time.perf_counter()
        for _agent, tool, args in calls:
            key = call_key(tool, args, ignore)
            seen[key] = seen.get(key, 0) + 1
        return time.perf_counter() - start

    def ruled(calls: list[Call]) -> float:
        states: dict[str, AgentState] = {}
        start = time.perf_counter()
        for agent, tool, args in calls:
            key = call_key(tool, args, ignore)
            assert key is not None
            state = states.get(agent) or states.setdefault(agent, AgentState())
            decide(state, key, config)
        return time.perf_counter() - start

    def stored(calls: list[Call]) -> float:
        store = MemoryStore()
        start = time.perf_counter()
        for agent, tool, args in calls:
            key = call_key(tool, args, ignore)
            assert key is not None

            def step(state: AgentState, key: bytes = key) -> Any:
                return decide(state, key, config)

            store.transact(agent, step)
        return time.perf_counter() - start

    rows: list[tuple[str, Callable[[list[Call]], float]]] = [
        ("the key inline (C encoder)", key_inline),
        ("+ keys.call_key", keyed),
        ("+ rules.decide on AgentState", ruled),
        ("+ MemoryStore.transact", stored),
        ("+ check() itself", lambda calls: check_loop(calls, config)),
    ]
    ratios: dict[str, list[float]] = {name: [] for name, _ in rows}
    for _ in range(7):
        floor = floor_loop(calls)
        for name, loop in rows:
            ratios[name].append(loop(calls) / floor)
    print(f"4. where check()'s time goes ({n:,} calls; each row adds a part, ratio to the floor)")
    for name, _ in rows:
        print(f"   {name:<30} median {statistics.median(ratios[name]):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--layers", action="store_true", help="4: check()'s parts, one by one")
    args = parser.parse_args()
    throughput(args.calls)
    memory_per_agent()
    window_scaling(args.calls)
    if args.layers:
        layers(args.calls)


if __name__ == "__main__":
    main()
