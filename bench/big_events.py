"""Memory of big structured hook events (issue 34, row 7): a JSON tree takes about 30
times its text in Python objects, so a 16 MiB event parsed whole costs hundreds of MB.

- one hook process (the command `install claude-code` writes) on a PreToolUse whose
  `tool_input` is ~16 MiB of small objects, then on a PostToolUse whose `tool_response`
  is: its peak RSS (the child's `ru_maxrss`), and the same for a small event, the floor;
- `serve --http`: 8 clients post such a PreToolUse at once while a ninth posts a small
  call; the guard's peak RSS (VmHWM), its RSS a second after they are answered (VmRSS),
  and how long the small call waited.

Linux only (/proc). Figures, not a test:

    .venv/bin/python bench/big_events.py [--mib 15.9] [--shape tiny|rows] [--clients 8]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from _scratch import scratch_env  # bench/ is on the path when a bench runs
from dsh_circuit_breaker.core.invocation import entry_point

TOKEN = "bench-token-0123456789abcdef"


def structured(size: int, shape: str) -> list[Any]:
    """About `size` bytes of JSON of many small objects: `tiny` ones (`{"a": 7}`, the
    costliest per byte in Python), or `rows` as a query's output looks."""
    if shape == "tiny":
        per = len(json.dumps([{"a": 10}] * 2)) - len(json.dumps([{"a": 10}]))
        return [{"a": 10 + i % 90} for i in range(size // per)]
    item = {"id": 100000, "name": "item-000000", "tags": ["a", "b"], "ok": True, "score": 0.5}
    per = len(json.dumps([item, item])) - len(json.dumps([item]))
    return [dict(item, id=100000 + i, name=f"item-{i:06d}") for i in range(size // per)]


def events(size: int, shape: str) -> dict[str, bytes]:
    base = {
        "session_id": "big-1",
        "transcript_path": "/tmp/big-1.jsonl",
        "cwd": "/tmp",
        "tool_name": "mcp__db__query",
        "tool_use_id": "toolu_01",
    }
    pre = dict(base, hook_event_name="PreToolUse", tool_input={"rows": structured(size, shape)})
    post = dict(
        base,
        hook_event_name="PostToolUse",
        tool_input={"sql": "select *"},
        tool_response={"rows": structured(size, shape)},
    )
    small = dict(base, hook_event_name="PreToolUse", tool_input={"sql": "select 1"})
    return {
        name: json.dumps(e).encode() for name, e in (("pre", pre), ("post", post), ("small", small))
    }


# Run from a small Python of its own: a child's peak RSS counts the pages it had between
# fork and exec, which from this process would be the events themselves.
MEASURE = """
import resource, subprocess, sys, time
started = time.perf_counter()
with open(sys.argv[1], "rb") as stdin:
    subprocess.run(sys.argv[2:], stdin=stdin, stdout=subprocess.DEVNULL, check=True)
seconds = time.perf_counter() - started
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, seconds)
"""


def hook_peak(env: dict[str, str], data: bytes, tmp: str) -> tuple[int, float]:
    """Peak RSS (MB) and wall seconds of one hook process reading `data`."""
    path = os.path.join(tmp, "event.json")
    with open(path, "wb") as f:
        f.write(data)
    command = [sys.executable, "-c", MEASURE, path, *entry_point(), "hook"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    peak, seconds = out.split()
    return int(peak), float(seconds)


def status_mb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    raise LookupError(field)


def post(port: int, body: bytes) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    started = time.perf_counter()
    connection.request("POST", "/hook/claude-code", body, headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    if response.status != 200:
        raise SystemExit(f"the guard answered {response.status}")
    return time.perf_counter() - started


def serve_figures(env: dict[str, str], bodies: dict[str, bytes], clients: int, tmp: str) -> None:
    with open(f"{tmp}/serve.log", "wb") as log:
        service = subprocess.Popen(
            [*entry_point(), "serve", "--http", "127.0.0.1:0", "--token", TOKEN],
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    try:
        assert service.stdout is not None
        found = re.search(rb"guarding on http://127\.0\.0\.1:(\d+)", service.stdout.readline())
        if found is None:
            raise SystemExit("serve --http did not start")
        port = int(found.group(1))
        post(port, bodies["small"])
        idle = status_mb(service.pid, "VmRSS")
        waits: list[float] = []
        big = [
            threading.Thread(target=lambda: waits.append(post(port, bodies["pre"])))
            for _ in range(clients)
        ]
        for thread in big:
            thread.start()
        small: list[float] = []
        while any(thread.is_alive() for thread in big):  # a small call every 0.2 s meanwhile
            small.append(post(port, bodies["small"]))
            time.sleep(0.2)
        for thread in big:
            thread.join()
        time.sleep(1.0)
        print(f"serve --http, {clients} x {len(bodies['pre']) / 2**20:.1f} MiB PreToolUse at once:")
        print(f"  RSS idle          {idle:6d} MB")
        print(f"  peak RSS (VmHWM)  {status_mb(service.pid, 'VmHWM'):6d} MB")
        print(f"  RSS 1 s after     {status_mb(service.pid, 'VmRSS'):6d} MB")
        print(
            f"  small calls meanwhile: {len(small)}, longest {max(small):.2f} s, median "
            f"{statistics.median(small):.2f} s (big calls: {min(waits):.2f}-{max(waits):.2f} s)"
        )
    finally:
        service.terminate()
        service.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=15.9, help="size of a big event")
    parser.add_argument("--shape", choices=("tiny", "rows"), default="tiny")
    parser.add_argument("--clients", type=int, default=8, help="big events posted at once")
    args = parser.parse_args()
    bodies = events(int(args.mib * 2**20), args.shape)
    with tempfile.TemporaryDirectory() as tmp:
        env = scratch_env(tmp)
        print(f"Python {sys.version.split()[0]}; one hook process (peak RSS, wall time):")
        for name in ("small", "pre", "post"):
            peak, seconds = hook_peak(env, bodies[name], tmp)
            size = len(bodies[name]) / 2**20
            print(f"  {name:5s} {size:5.1f} MiB  {peak:5d} MB  {seconds:5.2f} s")
        serve_figures(env, bodies, args.clients, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
