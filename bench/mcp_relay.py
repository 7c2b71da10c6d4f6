"""What the MCP relay (`dsh-circuit-breaker mcp -- COMMAND`) adds to each `tools/call` over
stdio, against the same server direct, in the same run.

    .venv/bin/python bench/mcp_relay.py [--calls 2000] [--rounds 3]

The upstream is the real `@modelcontextprotocol/server-everything` (tests/e2e), its
`echo` tool; the client is a plain JSON-RPC writer and reader on the pipes (no SDK, whose
own cost would hide the relay's). Every call has new arguments, so each is judged,
allowed and recorded in the store, never refused (the cap is raised past the calls
made). Two relays run: one on the default store (SQLite in a scratch state directory, as a
user gets it), one on `memory://`, so the store's share (one SQLite transaction per call,
what the command hook and `serve --http` pay too) shows apart from the relay's own.

1. Latency: one call at a time, request written to answer read, direct and through each
   relay, interleaved by round. Added = median(relay) - median(direct). Target: under
   0.3 ms.
2. Throughput: `--calls` requests written back to back while a thread reads the answers:
   calls per second, direct and relayed, as a ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _scratch import scratch_env  # bench/ is on the path when a bench runs

HERE = Path(__file__).resolve().parent
EVERYTHING = HERE.parent / "tests" / "e2e" / "node_modules" / ".bin" / "mcp-server-everything"
RELAY = [sys.executable, "-m", "dsh_circuit_breaker.cli", "mcp"]


class Server:
    """One stdio server process, driven by hand."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        self.next_id = 0
        self.ask(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(message).encode() + b"\n")
        self.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    def answer(self) -> dict[str, Any]:
        while True:
            message: dict[str, Any] = json.loads(self.stdout.readline())
            if "id" in message and "method" not in message:
                return message

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        sent = self.request(method, params)
        answer = self.answer()
        assert answer["id"] == sent, answer
        return answer

    def call(self, n: int) -> float:
        """Seconds for one new echo call, written to answered."""
        started = time.perf_counter()
        answer = self.ask("tools/call", {"name": "echo", "arguments": {"message": f"m{n}"}})
        seconds = time.perf_counter() - started
        assert "isError" not in answer["result"], answer
        return seconds

    def throughput(self, calls: int, start: int) -> float:
        """Calls per second with `calls` requests in flight at once."""
        done = threading.Event()

        def read() -> None:
            for _ in range(calls):
                self.answer()
            done.set()

        reader = threading.Thread(target=read)
        started = time.perf_counter()
        reader.start()
        for n in range(calls):
            params = {"name": "echo", "arguments": {"message": f"t{start + n}"}}
            self.request("tools/call", params)
        reader.join()
        return calls / (time.perf_counter() - started)

    def close(self) -> None:
        self.stdin.close()
        self.process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not EVERYTHING.exists():
        sys.exit(f"no {EVERYTHING}: run bash scripts/setup")
    upstream = ["node", str(EVERYTHING), "stdio"]
    with tempfile.TemporaryDirectory() as home:
        env = scratch_env(home)
        # Every call a new one, and more of them than the default cap of 300 allows.
        config = Path(home, "config.json")
        config.write_text(json.dumps({"maxCallsPerAgent": 10**9}))
        relay = [*RELAY, "--config", str(config)]
        servers = {
            "direct": Server(upstream, env),
            "relay, SQLite": Server([*relay, "--", *upstream], env),
            "relay, memory://": Server([*relay, "--state", "memory://", "--", *upstream], env),
        }
        times: dict[str, list[float]] = {name: [] for name in servers}
        rates: dict[str, list[float]] = {name: [] for name in servers}
        n = 0
        for _ in range(50):  # warm-up: JIT, page cache, the store's first writes
            for server in servers.values():
                n += 1
                server.call(n)
        for _ in range(args.rounds):
            for name, server in servers.items():
                for _ in range(args.calls // 4):
                    n += 1
                    times[name].append(server.call(n))
            for name, server in servers.items():
                rates[name].append(server.throughput(args.calls, n))
                n += args.calls
        for server in servers.values():
            server.close()
    report(times, rates, args)


def report(times: dict[str, list[float]], rates: dict[str, list[float]], args: Any) -> None:
    median = {k: statistics.median(v) * 1000 for k, v in times.items()}
    p90 = {k: statistics.quantiles(v, n=10)[8] * 1000 for k, v in times.items()}
    rate = {k: statistics.median(v) for k, v in rates.items()}
    direct = median["direct"]
    print(f"tools/call latency, one at a time ({len(times['direct'])} calls each):")
    for name in times:
        added = (
            ""
            if name == "direct"
            else (f": added {median[name] - direct:.3f} ms, ratio {median[name] / direct:.2f}")
        )
        print(f"  {name:17} median {median[name]:.3f} ms, p90 {p90[name]:.3f} ms{added}")
    print(f"throughput, {args.calls} calls in flight (median of {args.rounds} rounds):")
    for name in rates:
        ratio = "" if name == "direct" else f": ratio {rate[name] / rate['direct']:.2f}"
        print(f"  {name:17} {rate[name]:.0f} calls/s{ratio}")


if __name__ == "__main__":
    main()
