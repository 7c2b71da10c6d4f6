"""Replay throughput (calls per second) and memory on a large transcript directory.

    .venv/bin/python bench/replay_throughput.py [--size-mib 1024] [--keep DIR]

Generates, in a temporary directory, a transcript directory of corpus-like records in
every format the readers take: DSH session logs (some zstd-compressed when `zstandard` is
installed), Claude Code sessions, mini-swe-agent trajectories and one large tau2-bench
results file holding a quarter of the bytes (read member by member). Healthy runs mix
a few tools with large outputs; one run in ten loops (one call repeated 60-100 times
back to back, as in the tau2-bench loops). Nothing is copied from ../shared.

The files are read once before measuring (page cache warm), then each measurement runs
in a fresh process so its peak RSS is its own:
1. read only: every file parsed and every call produced (the floor for any replay);
2. replay: the same plus one real `CircuitBreaker(Config())` check per call;
3. replay CLI: `dsh-circuit-breaker replay DIR --json` end to end, output discarded;
4. replay of an eighth of the directory: peak RSS should not grow with the directory.
Printed as ratios against the read-only baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

TOOLS = ("bash", "read_file", "grep", "web_search", "edit_file")


def _args(rng: random.Random, tool: str, i: int) -> dict[str, Any]:
    if tool == "bash":
        return {"command": f"python -m pytest tests/test_mod{i % 40}.py -q", "description": f"r{i}"}
    if tool == "read_file":
        return {"path": f"src/pkg/module_{rng.randrange(300)}.py", "offset": rng.randrange(50)}
    if tool == "grep":
        return {"pattern": f"def handler_{rng.randrange(999)}", "path": "src/"}
    if tool == "web_search":
        return {"query": f"asyncio cancel scope timeout example {rng.randrange(10_000)}"}
    return {"path": f"src/pkg/module_{i % 300}.py", "old": "x = 1", "new": f"x = {i}"}


def run_calls(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """One run's calls: 20-120 healthy ones, and for one run in ten a long loop."""
    calls = []
    for i in range(rng.randrange(20, 120)):
        tool = rng.choice(TOOLS)
        calls.append((tool, _args(rng, tool, i)))
    if rng.random() < 0.1:
        tool = "transfer_to_human_agents"
        args = {"summary": f"user {rng.randrange(10_000)} wants a refund the policy forbids"}
        calls.extend([(tool, args)] * rng.randrange(60, 100))
    return calls


def output(rng: random.Random) -> str:
    # Tool results make up most of a transcript's bytes (file contents, test logs).
    size = rng.choice((200, 800, 3000, 12000))
    line = "tests/test_mod.py::test_case PASSED                                   [ 42%]\n"
    return (line * (size // len(line) + 1))[:size]


def dsh_session(rng: random.Random, sid: str) -> str:
    t = 1_790_000_000_000
    lines = [
        json.dumps(
            {
                "type": "session",
                "version": 4,
                "id": sid,
                "createdAt": t,
                "isSeeded": False,
                "delegationDepth": 0,
            }
        )
    ]
    for n, (tool, args) in enumerate(run_calls(rng)):
        t += rng.randrange(300, 9000)
        cid = f"call_{n:04d}_{sid[:6]}"
        data = {"turn": 1, "step": n, "callId": cid, "name": tool, "arguments": json.dumps(args)}
        lines.append(json.dumps({"type": "tool/call", "seq": 2 * n, "time": t, "data": data}))
        result = {  # DSH 0.2.1's v4 shape: the tool message carries id and isError
            "role": "tool",
            "source": {"kind": "tool", "callId": cid},
            "toolCallId": cid,
            "content": [{"type": "text", "text": output(rng)}],
            "isError": rng.random() < 0.05,
        }
        lines.append(
            json.dumps(
                {
                    "type": "tool/result",
                    "seq": 2 * n + 1,
                    "time": t + 40,
                    "data": {"turn": 1, "step": n, "message": result},
                }
            )
        )
    return "\n".join(lines) + "\n"


def claude_session(rng: random.Random, sid: str) -> str:
    lines = []
    for n, (tool, args) in enumerate(run_calls(rng)):
        ts = f"2026-11-30T01:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
        use = {"type": "tool_use", "id": f"toolu_{sid}_{n}", "name": tool, "input": args}
        lines.append(
            json.dumps(
                {
                    "type": "assistant",
                    "sessionId": sid,
                    "uuid": f"a{n}",
                    "timestamp": ts,
                    "isSidechain": False,
                    "message": {"role": "assistant", "content": [use]},
                }
            )
        )
        res = {"type": "tool_result", "tool_use_id": use["id"], "content": output(rng)}
        lines.append(
            json.dumps(
                {
                    "type": "user",
                    "sessionId": sid,
                    "uuid": f"u{n}",
                    "timestamp": ts,
                    "message": {"role": "user", "content": [res]},
                }
            )
        )
    return "\n".join(lines) + "\n"


def mini_swe(rng: random.Random, name: str) -> str:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for tool, args in run_calls(rng):
        command = args.get("command") or f"{tool} {json.dumps(args)}"
        messages.append(
            {"role": "assistant", "content": f"THOUGHT: next.\n\n```bash\n{command}\n```"}
        )
        messages.append(
            {
                "role": "user",
                "content": f"<returncode>0</returncode>\n<output>\n{output(rng)}</output>",
            }
        )
    return json.dumps(
        {
            "info": {"exit_status": "Submitted"},
            "messages": messages,
            "trajectory_format": "mini-swe-agent-1",
            "instance_id": name,
        }
    )


def tau2_simulation(rng: random.Random, index: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for n, (tool, args) in enumerate(run_calls(rng)):
        ts = f"2026-11-26T01:{n // 60 % 60:02d}:{n % 60:02d}.000000"
        cid = f"chatcmpl-tool-{index}-{n}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "timestamp": ts,
                "tool_calls": [
                    {"id": cid, "name": tool, "arguments": args, "requestor": "assistant"}
                ],
            }
        )
        messages.append(
            {"role": "tool", "id": cid, "content": output(rng), "error": False, "timestamp": ts}
        )
    return {
        "id": f"sim-{index}",
        "task_id": str(index),
        "trial": 0,
        "termination_reason": "user_stop",
        "messages": messages,
    }


def generate(root: str, size: int, seed: int = 11) -> dict[str, int]:
    """Write about `size` bytes of transcripts under `root`; returns bytes per format."""
    rng = random.Random(seed)
    try:
        import zstandard

        packer: Any = zstandard.ZstdCompressor(level=3)
    except ImportError:
        packer = None
    written = {"dsh": 0, "claude-code": 0, "mini-swe-agent": 0, "tau2": 0}
    shares = {"dsh": 0.35, "claude-code": 0.2, "mini-swe-agent": 0.2, "tau2": 0.25}
    for sub in ("dsh", "claude", "mini"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    n = 0
    while written["dsh"] < size * shares["dsh"]:
        sid = f"{n:08x}-0000-4000-8000-{rng.randrange(16**12):012x}"
        text = dsh_session(rng, sid).encode()
        if packer is not None and n % 10 == 0:
            directory = os.path.join(root, "dsh", sid)
            os.makedirs(directory, exist_ok=True)
            path, data = os.path.join(directory, "session.v4.jsonl.zstd"), packer.compress(text)
        else:
            path, data = os.path.join(root, "dsh", f"session-{sid}.jsonl"), text
        with open(path, "wb") as fh:
            fh.write(data)
        written["dsh"] += len(text)
        n += 1
    while written["claude-code"] < size * shares["claude-code"]:
        sid = f"{n:08x}-cc"
        text = claude_session(rng, sid)
        with open(os.path.join(root, "claude", f"{sid}.jsonl"), "w") as fh:
            fh.write(text)
        written["claude-code"] += len(text)
        n += 1
    while written["mini-swe-agent"] < size * shares["mini-swe-agent"]:
        name = f"proj__proj-{n}"
        text = mini_swe(rng, name)
        with open(os.path.join(root, "mini", f"{name}.traj.json"), "w") as fh:
            fh.write(text)
        written["mini-swe-agent"] += len(text)
        n += 1
    with open(os.path.join(root, "tau2-results.json"), "w") as fh:
        fh.write(
            '{"timestamp": "2026-11-26T01:00:00", "info": {"max_steps": 200}, "simulations": ['
        )
        index = 0
        while written["tau2"] < size * shares["tau2"]:
            text = ("," if index else "") + json.dumps(tau2_simulation(rng, index))
            fh.write(text)
            written["tau2"] += len(text)
            index += 1
        fh.write("]}")
    return written


def child(mode: str, root: str) -> None:
    """One measurement, in its own process: prints calls, seconds and peak RSS."""
    from dsh_circuit_breaker.core.config import Config
    from dsh_circuit_breaker.transcripts import Problems, read_transcripts, walk
    from dsh_circuit_breaker.transcripts.analysis import runs_of

    problems = Problems(stream=None)
    start = time.perf_counter()
    calls = runs = denied = 0
    transcripts = read_transcripts(walk([root], problems), problems)
    if mode == "read":
        for t in transcripts:
            runs += 1
            calls += sum(1 for _ in t.calls())
    else:
        for run in runs_of(transcripts, [Config()]):
            runs += 1
            calls += run.calls
            denied += run.tracks[0].denied
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {
                "calls": calls,
                "runs": runs,
                "denied": denied,
                "seconds": seconds,
                "rss": rss,
                "problems": problems.count,
            }
        )
    )


def measure(mode: str, root: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, root],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def measure_cli(root: str) -> dict[str, Any]:
    script = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "subprocess.run([sys.executable, '-m', 'dsh_circuit_breaker.cli', 'replay', sys.argv[1],"
        " '--json'], stdout=subprocess.DEVNULL, check=True)\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, root], capture_output=True, text=True, check=True
    )
    seconds, rss = out.stdout.split()
    return {"seconds": float(seconds), "rss": int(rss) * 1024}


def warm(root: str) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(directory, name), "rb") as fh:
                while fh.read(1 << 20):
                    pass


def du(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="uncompressed size to generate")
    parser.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    base = args.keep or tempfile.mkdtemp(prefix="dshcb-replay-bench-")
    try:
        size = args.size_mib << 20
        full, small = os.path.join(base, "full"), os.path.join(base, "eighth")
        t = time.perf_counter()
        made = generate(full, size)
        generate(small, size // 8, seed=12)
        print(
            f"generated {sum(made.values()) / 2**20:.0f} MiB of transcripts "
            f"({', '.join(f'{k} {v / 2**20:.0f} MiB' for k, v in made.items())}; "
            f"{du(full) / 2**20:.0f} MiB on disk) in {time.perf_counter() - t:.0f}s"
        )
        warm(base)  # every measurement then reads from the page cache, none from disk
        read = measure("read", full)
        replay = measure("replay", full)
        eighth = measure("replay", small)
        cli = measure_cli(full)
        mib = 2**20
        print(
            f"\nread only (baseline): {read['calls']:,} calls in {read['runs']:,} runs, "
            f"{read['seconds']:.1f}s = {read['calls'] / read['seconds']:,.0f} calls/s, "
            f"peak RSS {read['rss'] / mib:.0f} MiB"
        )
        print(
            f"replay (read + check): {replay['seconds']:.1f}s = "
            f"{replay['calls'] / replay['seconds']:,.0f} calls/s, {replay['denied']:,} denied, "
            f"peak RSS {replay['rss'] / mib:.0f} MiB"
        )
        print(
            f"replay CLI --json: {cli['seconds']:.1f}s = {replay['calls'] / cli['seconds']:,.0f} "
            f"calls/s, peak RSS {cli['rss'] / mib:.0f} MiB"
        )
        print(f"replay of 1/8 of the size: peak RSS {eighth['rss'] / mib:.0f} MiB")
        print("\nratios:")
        print(f"  replay time / read-only time:        {replay['seconds'] / read['seconds']:.2f}x")
        print(
            "  bytes per second, replay:            "
            f"{sum(made.values()) / replay['seconds'] / mib:.0f} MiB/s"
        )
        print(
            f"  peak RSS, full / one eighth:         {replay['rss'] / eighth['rss']:.2f}x "
            "(bounded memory: about 1x)"
        )
        print(f"  peak RSS / directory size:           {replay['rss'] / sum(made.values()):.3f}")
        if read["problems"] or replay["problems"]:
            print(f"  problems reported: {read['problems']} (read), {replay['problems']} (replay)")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
