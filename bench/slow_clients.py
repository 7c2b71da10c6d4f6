"""The HTTP guard under hostile clients (issue 23, rows 3 and 4), in short bursts:

- slow: N clients without a token trickle a request head a byte every half second,
  while a harness makes 160 calls one after another (as Claude Code does);
- burst: 500 valid clients connect and post one call each, all at once, while the N
  slow clients still hold their connections;
- fat headers: 120 clients without a token each send 99 header lines of 64 KiB.

For each: the harness's calls answered (of those made), how long the slowest took, and the
guard's resident memory (VmRSS) before and at its peak.

    .venv/bin/python bench/slow_clients.py [--slow 300] [--burst 500] [--fat 120]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

TOKEN = "bench-token-0123456789abcdef"
READY = re.compile(rb"guarding on http://127\.0\.0\.1:(\d+)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slow", type=int, default=300, help="slow clients without a token")
    parser.add_argument("--burst", type=int, default=500, help="simultaneous valid clients")
    parser.add_argument("--fat", type=int, default=120, help="clients sending 6 MiB of headers")
    parser.add_argument("--calls", type=int, default=160, help="the harness's sequential calls")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, HOME=home, XDG_STATE_HOME=f"{home}/state")
        env.pop("DSH_CIRCUIT_BREAKER_CONFIG", None)
        command = [sys.executable, "-m", "dsh_circuit_breaker.cli", "serve", "--http", "0"]
        guard = subprocess.Popen(
            [*command, "--token", TOKEN],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert guard.stdout is not None
            found = READY.search(guard.stdout.readline())
            assert found, "the guard did not start"
            port = int(found.group(1))
            print(f"interpreter: {sys.executable}; cores: {os.cpu_count()}")
            asyncio.run(run(args, port, guard.pid))
        finally:
            guard.terminate()
            guard.wait(10)


async def run(args: argparse.Namespace, port: int, pid: int) -> None:
    memory = Memory(pid)
    print(f"guard resident memory at rest: {memory.now():.1f} MB")
    slow = [asyncio.create_task(trickle(port)) for _ in range(args.slow)]
    await asyncio.sleep(2)  # every slow client connected and trickling
    memory.reset()
    answered, slowest = await sequential(port, args.calls)
    print(
        f"{args.slow} slow clients: {answered} of {args.calls} sequential harness calls "
        f"answered, the slowest in {slowest:.2f} s; memory {memory.line()}"
    )
    if args.burst:
        memory.reset()
        started = time.monotonic()
        calls = (one_call(port, f"burst-{n}") for n in range(args.burst))
        results = await asyncio.gather(*calls)
        print(
            f"{args.burst} simultaneous valid clients (with the {args.slow} slow ones): "
            f"{sum(ok for ok, _ in results)} answered, the slowest in "
            f"{max(s for _, s in results):.2f} s, all in {time.monotonic() - started:.2f} s; "
            f"memory {memory.line()}"
        )
    for task in slow:
        task.cancel()
    await asyncio.gather(*slow, return_exceptions=True)
    if args.fat:
        await asyncio.sleep(1)
        memory.reset()
        fat = [asyncio.create_task(fat_headers(port)) for _ in range(args.fat)]
        answered, slowest = await sequential(port, 20)
        cut = sum(await asyncio.gather(*fat))
        print(
            f"{args.fat} clients sending 99 header lines of 64,000 bytes: {cut} cut off "
            f"before sending it all; {answered} of 20 harness calls answered meanwhile, the "
            f"slowest in {slowest:.2f} s; memory {memory.line()}"
        )
    memory.stop()


class Memory:
    """The guard's VmRSS, sampled every 50 ms on a thread: `line()` is since `reset()`."""

    def __init__(self, pid: int) -> None:
        self.path = f"/proc/{pid}/status"
        self.start = self.peak = self.now()
        self._stopped = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def now(self) -> float:
        try:
            with open(self.path) as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def _sample(self) -> None:
        while not self._stopped.wait(0.05):
            self.peak = max(self.peak, self.now())

    def reset(self) -> None:
        self.start = self.peak = self.now()

    def line(self) -> str:
        return f"{self.start:.1f} MB before, {self.peak:.1f} MB at peak"

    def stop(self) -> None:
        self._stopped.set()


async def trickle(port: int) -> None:
    """A client without a token that sends a request head a byte every half second."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    try:
        for byte in b"POST /hook/claude-code HTTP/1.1\r\nX-Pad: " + b"a" * 1000:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.5)
    except (OSError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def fat_headers(port: int) -> bool:
    """99 header lines of 64 KiB and no token; True if the guard cut it off first."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    line = b"X-Fat: " + b"f" * (64 * 1000) + b"\r\n"  # under http.server's 64 KiB a line
    try:
        writer.write(b"POST /hook/claude-code HTTP/1.1\r\n")
        for _ in range(99):
            writer.write(line)
            await asyncio.wait_for(writer.drain(), 10)
        writer.write(b"\r\n")
        await asyncio.wait_for(writer.drain(), 10)
        return False
    except (OSError, asyncio.TimeoutError):
        return True
    finally:
        writer.close()


def event(session: str, command: str) -> bytes:
    return json.dumps(
        {
            "session_id": session,
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "cwd": "/tmp",
        }
    ).encode()


async def one_call(port: int, session: str, command: str = "echo hi") -> tuple[bool, float]:
    """One call on a new connection: (answered with 200, seconds)."""
    started = time.monotonic()
    body = event(session, command)
    head = (
        f"POST /hook/claude-code HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
        try:
            writer.write(head + body)
            status = await asyncio.wait_for(reader.readline(), 30)
            await asyncio.wait_for(reader.read(), 30)
        finally:
            writer.close()
    except (OSError, asyncio.TimeoutError):
        return False, time.monotonic() - started
    return status.startswith(b"HTTP/1.1 200"), time.monotonic() - started


async def sequential(port: int, calls: int) -> tuple[int, float]:
    results: list[Any] = []
    for n in range(calls):
        results.append(await one_call(port, "harness", f"echo {n}"))
    return sum(ok for ok, _ in results), max(s for _, s in results)


if __name__ == "__main__":
    main()
