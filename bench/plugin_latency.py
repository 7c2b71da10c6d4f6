"""What the plugin adds to each tool call in pi, OpenCode and Kilo Code, measured inside
the real CLIs (tests/e2e) against the scripted model on 127.0.0.1.

    .venv/bin/python bench/plugin_latency.py [--harness pi] [--calls 100] [--rounds 3]
        [--results]

Each round runs the same session twice: once with the plugin that the installed wheel's
`install` writes (scripts/setup makes .installed/), with its default state (the command
hooks' SQLite file), once without it (the baseline). Every tool call is a new one
(`bash echo <n>`), so each is checked and recorded and none is refused.

1. Handler time: two bench timers (bench/plugin_timing.mjs), one loaded before the
   breaker and one after it, stamp every tool call; after - before is the breaker's
   handler (plugin -> guard process -> plugin). Added latency: the difference of the
   medians with and without it.
2. Whole tool-call time: (session wall time) / calls, with and without, as a ratio; the
   user's view (start-up, the model round trip and bash included).
3. With `--results`, both sides run the breaker, with results off (`resultProgress: false`,
   `sameResultLimit: 0`) and with `resultProgress: true`:
   what reporting each call's result (the harness's after-tool event, one more line to
   the guard, one more store write there) adds. The handler time then includes a check
   that waits for the guard to finish recording the previous call's result.
4. With `--waiter timeout|fs|pipe` (OpenCode, Kilo), a bench plugin that only waits (a zero
   timer, a read of /dev/null, a line through `cat`) takes the breaker's place: what the
   harness charges any hook that waits on I/O.

Where the timers go: pi loads `-e` extensions first, and the user's
(~/.pi/agent/extensions/, ours among them) last, in name order (so `zz-bench-after.js`
comes after `dsh-circuit-breaker.js`); OpenCode and Kilo load the plugins
named in the global config file before the global plugin directory (ours), and project
plugin directories (.opencode/plugins/, .kilo/plugins/) after it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from support.fake_openai import function_call  # noqa: E402
from support.installed import Installed, the_venv  # noqa: E402
from support.plugin_harnesses import E2E_BIN, HARNESSES, Harness  # noqa: E402

TIMING = (HERE / "plugin_timing.mjs").as_uri()
# Named explicitly: the default has changed before.
RESULTS_OFF = {"resultProgress": False, "sameResultLimit": 0}


def timer(role: str, kind: str) -> str:
    make = "piTiming" if kind == "pi" else "openCodeTiming"
    return f'import {{ {make} }} from "{TIMING}";\nexport default {make}("{role}");\n'


def place_timers(harness: Harness, scratch: Path) -> list[str]:
    """Write the two timers where they load before and after the breaker; returns the
    extra command-line flags."""
    if harness.name == "pi":
        before = scratch / "bench-before.js"
        before.write_text(timer("before", "pi"))
        after = harness.agent_dir / "extensions" / "zz-bench-after.js"  # type: ignore[attr-defined]
        after.parent.mkdir(parents=True, exist_ok=True)
        after.write_text(timer("after", "pi"))
        return ["-e", str(before)]
    before = scratch / "bench-before.js"
    before.write_text(timer("before", "opencode"))
    after = harness.work / f".{harness.app}" / "plugins" / "bench-after.js"  # type: ignore[attr-defined]
    after.parent.mkdir(parents=True)
    after.write_text(timer("after", "opencode"))
    harness.extra_config = {"plugin": [before.as_uri()]}  # type: ignore[attr-defined]
    return []


def one_run(
    name: str,
    calls: int,
    with_breaker: bool,
    waiter: str | None = None,
    config: dict[str, Any] | None = None,
) -> tuple[list[float], float]:
    """Per-call handler microseconds (after - before), and wall seconds per tool call;
    `config`: the breaker's config file, for install --config."""
    with tempfile.TemporaryDirectory(prefix="cb-bench-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        harness = HARNESSES[name](Installed(the_venv(), home))
        timings = Path(tmp) / "timings.tsv"
        harness.env["BENCH_TIMING_FILE"] = str(timings)
        if with_breaker and config:
            path = Path(tmp) / "breaker.json"
            path.write_text(json.dumps(config))
            harness.install("--config", str(path))
        elif with_breaker:
            harness.install()
        flags = place_timers(harness, Path(tmp))
        if waiter:
            plugins = harness.config_dir / "plugins"  # type: ignore[attr-defined]
            plugins.mkdir(parents=True, exist_ok=True)
            make = f'import {{ openCodeWaiter }} from "{TIMING}";\n'
            (plugins / "bench-waiter.js").write_text(
                f"{make}export default openCodeWaiter({waiter!r});\n"
            )
        turns: list[Any] = [
            function_call("bash", {"command": f"echo {i}", "description": "Count"})
            for i in range(calls)
        ]
        with harness.model([*turns, "Counted."]) as model:
            started = time.perf_counter()
            result = harness.run(model, "Count.", flags=tuple(flags), timeout=900)
            wall = time.perf_counter() - started
        if result.returncode != 0:
            raise SystemExit(f"{name} run failed: {result.stderr[-2000:]}")
        if any("Circuit breaker" in r.text for r in model.tool_results()):
            raise SystemExit("a call was refused; the bench expects none")
        if with_breaker and not (result.ready and result.ready[0]["ok"]):
            raise SystemExit("the plugin did not start its guard")
        stamps: dict[str, dict[str, int]] = {}
        for line in timings.read_text().splitlines():
            role, call, ns = line.split("\t")
            stamps.setdefault(call, {})[role] = int(ns)
        paired = [s["after"] - s["before"] for s in stamps.values() if len(s) == 2]
        if len(paired) != calls or min(paired) < 0:
            raise SystemExit(f"timed {len(paired)} of {calls} calls (timer order wrong?)")
        return [ns / 1000 for ns in paired], wall / calls


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def bench(name: str, calls: int, rounds: int, waiter: str | None, results: bool) -> None:
    with_us: list[float] = []
    without: list[float] = []
    wall_with: list[float] = []
    wall_without: list[float] = []
    on = {"resultProgress": True} if results else None
    for _ in range(rounds):  # alternate, so drift on the machine hits both sides alike
        t, w = one_run(name, calls, with_breaker=results, config=RESULTS_OFF)
        without += t
        wall_without.append(w)
        t, w = one_run(name, calls, with_breaker=waiter is None, waiter=waiter, config=on)
        with_us += t
        wall_with.append(w)
    them = f"the {waiter} waiter" if waiter else "the breaker"
    base = "no plugin"
    if results:
        them, base = "results (resultProgress)", "the breaker, results off"
    print(f"{name}: {rounds} x {calls} tool calls each way ({len(with_us)} per side), {them}")
    print(f"  handler time per call (microseconds): {'median':>8} {'p90':>8} {'p99':>8}")
    for label, values in ((base, without), (f"with {them}", with_us)):
        print(
            f"    {label:34} {statistics.median(values):8.1f} {pct(values, 0.9):8.1f}"
            f" {pct(values, 0.99):8.1f}"
        )
    added = statistics.median(with_us) - statistics.median(without)
    print(f"  added by {them}: median {added:.1f} us")
    mw, mo = statistics.median(wall_with), statistics.median(wall_without)
    print(
        f"  whole tool call (wall / calls): {base} {mo * 1000:.1f} ms, "
        f"with {them} {mw * 1000:.1f} ms, ratio {mw / mo:.3f}\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", choices=sorted(HARNESSES), action="append")
    parser.add_argument("--calls", type=int, default=100, help="tool calls per session")
    parser.add_argument("--rounds", type=int, default=3, help="with/without pairs")
    parser.add_argument(
        "--waiter",
        choices=("timeout", "fs", "pipe"),
        help="OpenCode, Kilo: time a plugin that only waits, in the breaker's place",
    )
    parser.add_argument(
        "--results",
        action="store_true",
        help="the breaker with resultProgress against the breaker without it",
    )
    args = parser.parse_args()
    if args.waiter and args.results:
        parser.error("--waiter and --results measure different things: one at a time")
    if args.waiter and "pi" in (args.harness or ["pi"]):
        parser.error("--waiter is for OpenCode and Kilo: name them with --harness")
    for name in args.harness or sorted(HARNESSES):
        if not (E2E_BIN / HARNESSES[name].executable).exists():
            print(f"{name}: not installed (tests/e2e: npm ci); skipped")
            continue
        bench(name, args.calls, args.rounds, args.waiter, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
