"""What the DSH plugin adds to each tool call, measured inside the real DSH runtime.

    .venv/bin/python bench/dsh_latency.py [--calls 200] [--rounds 3] [--results]

Runs the DeepSeek Harness runtime (deepseek-harness-sdk) against the scripted fake model,
twice per round: once with the circuit-breaker plugin, once without it (the baseline, same
runtime, same script). Every tool call is a new one (`bash echo <n>`), so each is checked
and recorded and none is denied.

1. Pre-execute time: a bench-only plugin (bench/dsh_timing_plugin.mjs), loaded before the
   breaker, times the rest of DSH's `tools/pre-execute` waterfall for every call: with the
   breaker that is plugin -> guard process -> plugin; without it, DSH's default. The added
   latency is the difference of the medians. Target: median under 1 ms.
2. Whole tool-call time: session wall time / calls, with and without, as a ratio (this
   includes the model round trip and the bash process, so it is the user's view).
3. With `--results`, both sides run the breaker, with results off (`resultProgress: false`,
   `sameResultLimit: 0`) and with `resultProgress: true`
   (the plugin's `tools/post-execute` listener reports each result: one more line to the
   guard, one more store write there).
4. For reference, the guard's round trip from a plain Python client, outside DSH: back to
   back (the floor of what the pipe protocol costs), and with an 80 ms idle gap before each
   call, as between real tool calls (then both processes are asleep when a call comes, and
   waking them is most of the cost).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from support.dsh_runtime import (  # noqa: E402
    DshSession,
    dsh_runtime_available,
    insert_row,
    insert_row_for,
)
from support.fake_anthropic import tool_use  # noqa: E402

TIMING_PLUGIN = HERE / "dsh_timing_plugin.mjs"
# Named explicitly: the default has changed before.
RESULTS_OFF = {"resultProgress": False, "sameResultLimit": 0}


def one_run(
    calls: int, with_breaker: bool, config: dict[str, Any] | None = None
) -> tuple[list[float], float]:
    """Per-call pre-execute microseconds, and wall seconds per tool call; `config`: more
    keys for the breaker's entry."""
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        session = DshSession(Path(tmp))
        timings = Path(tmp) / "timings.tsv"
        session.add_patch(
            "timing.yml", insert_row_for(TIMING_PLUGIN, {"path": str(timings)}, "bench-timing")
        )
        if with_breaker:
            entry = {"python": sys.executable, **(config or {})}
            session.add_patch("breaker.yml", insert_row(entry))
        turns: list[Any] = [
            tool_use("bash", {"command": f"echo {i}", "description": "Count"}) for i in range(calls)
        ]
        started = time.perf_counter()
        run = session.run(turns, timeout=600)
        wall = time.perf_counter() - started
        errors = [r for r in run.model.tool_results() if r.is_error]
        if errors:
            raise SystemExit(f"unexpected error results: {errors[:2]}")
        if with_breaker and not (run.starts() and run.starts()[0]["ok"]):
            raise SystemExit("the breaker plugin did not start its guard")
        rows = [line.split("\t") for line in timings.read_text().splitlines()]
        if len(rows) != calls:
            raise SystemExit(f"timed {len(rows)} calls, expected {calls}")
        return [float(r[2]) for r in rows], wall / calls


def round_trips(calls: int, gap: float = 0.0) -> list[float]:
    guard = subprocess.Popen(
        [sys.executable, "-m", "dsh_circuit_breaker.cli", "serve", "--stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert guard.stdin is not None and guard.stdout is not None
    times = []
    try:
        for i in range(calls):
            request = {"id": i, "agent": "a", "tool": "bash", "arguments": {"command": f"echo {i}"}}
            line = json.dumps(request).encode() + b"\n"
            if gap:
                time.sleep(gap)
            started = time.perf_counter()
            guard.stdin.write(line)
            guard.stdin.flush()
            guard.stdout.readline()
            times.append((time.perf_counter() - started) * 1e6)
    finally:
        guard.stdin.close()
        guard.wait()
    return times


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="tool calls per session")
    parser.add_argument("--rounds", type=int, default=3, help="with/without pairs")
    parser.add_argument(
        "--results",
        action="store_true",
        help="the breaker with resultProgress against the breaker without it",
    )
    args = parser.parse_args()
    if not dsh_runtime_available():
        print("deepseek-harness-sdk is not installed: pip install -e '.[dsh]'")
        return 2

    with_us: list[float] = []
    without: list[float] = []
    wall_with: list[float] = []
    wall_without: list[float] = []
    on = {"resultProgress": True} if args.results else None
    for _ in range(args.rounds):
        # Alternate, so drift on the machine hits both sides alike.
        t, w = one_run(args.calls, with_breaker=args.results, config=RESULTS_OFF)
        without += t
        wall_without.append(w)
        t, w = one_run(args.calls, with_breaker=True, config=on)
        with_us += t
        wall_with.append(w)

    n = len(with_us)
    print(f"DSH runtime, {args.rounds} x {args.calls} tool calls each way ({n} per side)\n")
    print("pre-execute waterfall per call (microseconds):")
    print(f"  {'':18} {'median':>8} {'p90':>8} {'p99':>8}")
    base, them = ("results off", "results on") if args.results else ("no plugin", "with breaker")
    for label, values in ((base, without), (them, with_us)):
        print(
            f"  {label:18} {statistics.median(values):8.1f} {pct(values, 0.9):8.1f}"
            f" {pct(values, 0.99):8.1f}"
        )
    added = statistics.median(with_us) - statistics.median(without)
    verdict = "meets" if added < 1000 else "MISSES"
    print(f"  added ({them}): median {added:.1f} us ({verdict} the < 1 ms target)")
    ratio = statistics.median(with_us) / max(statistics.median(without), 0.1)
    print(f"  ratio with/without: {ratio:.1f}x")
    mw, mo = statistics.median(wall_with), statistics.median(wall_without)
    print("\nwhole tool call (session wall time / calls; model round trip + bash included):")
    print(f"  {base} {mo * 1000:.2f} ms, {them} {mw * 1000:.2f} ms, ratio {mw / mo:.3f}")
    print("\nguard round trip from a plain Python client, outside DSH (microseconds):")
    for label, calls, gap in (("back to back", 2000, 0.0), ("80 ms idle gap", 100, 0.08)):
        times = round_trips(calls, gap)
        median = statistics.median(times)
        print(
            f"  {label:16} median {median:7.1f}, p90 {pct(times, 0.9):7.1f},"
            f" p99 {pct(times, 0.99):7.1f} ({calls} calls)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
