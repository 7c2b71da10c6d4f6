"""What the OpenClaw plugin adds to each tool call, measured inside the real OpenClaw
(tests/e2e/openclaw) against the scripted model on 127.0.0.1.

    .venv/bin/python bench/openclaw_latency.py [--calls 40] [--rounds 1]

As bench/plugin_latency.py does for pi, OpenCode and Kilo: each round runs one
`openclaw agent --local` session with the plugin that the installed wheel's `install`
writes (default state: the command hooks' SQLite file) and one without it; every tool call
is a new one (`exec echo <n>`), so each is checked and recorded and none is refused. Two
timer plugins hook `before_tool_call` at priorities 1000 and -1000 (OpenClaw runs higher
first; ours is at 0): after - before is the breaker's handler (plugin -> guard -> plugin),
and the difference of the medians with and without it is the latency it adds. Times are
kept in memory and written at exit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from support.fake_openai import FakeOpenAI, function_call  # noqa: E402
from support.installed import Installed, the_venv  # noqa: E402
from support.plugin_harnesses import closed_port  # noqa: E402

BIN = HERE.parent / "tests" / "e2e" / "openclaw" / "node_modules" / ".bin"
TIMER = """import { appendFileSync } from 'node:fs';
const rows = [];
process.on('exit', () => appendFileSync(process.env.BENCH_TIMING_FILE, rows.join('')));
export default {
  id: 'bench-%(role)s',
  name: 'bench-%(role)s',
  register(api) {
    api.on('before_tool_call', (event) => {
      rows.push(`%(role)s\\t${event.toolCallId}\\t${process.hrtime.bigint()}\\n`);
      return undefined;
    }, { priority: %(priority)d });
  },
};
"""


def one_run(calls: int, with_breaker: bool) -> tuple[list[float], float]:
    """Per-call handler microseconds (after - before), and wall seconds per tool call."""
    with tempfile.TemporaryDirectory(prefix="cb-bench-openclaw-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        product = Installed(the_venv(), home)
        env = {k: v for k, v in product.env.items() if not k.startswith("OPENCLAW_")}
        dead = f"http://127.0.0.1:{closed_port()}"
        env.update(PATH=f"{BIN}:{env['PATH']}", HTTP_PROXY=dead, HTTPS_PROXY=dead)
        env.update(NO_PROXY="127.0.0.1", BENCH_TIMING_FILE=str(Path(tmp) / "timings.tsv"))
        if with_breaker:
            done = product.run("install", "openclaw", env=env)
            if done.returncode != 0:
                raise SystemExit(done.stderr)
        config = home / ".openclaw" / "openclaw.json"
        data = json.loads(config.read_text()) if config.exists() else {}
        plugins = data.setdefault("plugins", {})
        for role, priority in (("before", 1000), ("after", -1000)):
            timer = Path(tmp) / f"bench-{role}.mjs"
            timer.write_text(TIMER % {"role": role, "priority": priority})
            plugins.setdefault("load", {}).setdefault("paths", []).append(str(timer))
            plugins.setdefault("entries", {})[f"bench-{role}"] = {"enabled": True}
        turns = [function_call("exec", {"command": f"echo {i}"}) for i in range(calls)]
        with FakeOpenAI([*turns, "Counted."]) as model:
            provider = {
                "api": "openai-completions",
                "baseUrl": model.url,
                "apiKey": "sk-bench",
                "models": [{"id": "fake-model", "name": "Fake"}],
            }
            data["models"] = {"mode": "replace", "providers": {"fake": provider}}
            data["agents"] = {"defaults": {"model": {"primary": "fake/fake-model"}}}
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(json.dumps(data))
            argv = [str(BIN / "openclaw"), "agent", "--local", "--session-id", str(uuid.uuid4())]
            started = time.perf_counter()
            done = subprocess.run(
                [*argv, "-m", "Count.", "--json"],
                env=env,
                cwd=home,
                capture_output=True,
                text=True,
                timeout=1800,
                stdin=subprocess.DEVNULL,
            )
            wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"openclaw failed: {done.stderr[-2000:]}")
        if any("Circuit breaker" in r.text for r in model.tool_results()):
            raise SystemExit("a call was refused; the bench expects none")
        stamps: dict[str, dict[str, int]] = {}
        for line in Path(env["BENCH_TIMING_FILE"]).read_text().splitlines():
            role, call, ns = line.split("\t")
            stamps.setdefault(call, {})[role] = int(ns)
        paired = [s["after"] - s["before"] for s in stamps.values() if len(s) == 2]
        if len(paired) != calls or min(paired) < 0:
            raise SystemExit(f"timed {len(paired)} of {calls} calls (timer order wrong?)")
        return [ns / 1000 for ns in paired], wall / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    handler: dict[bool, list[float]] = {True: [], False: []}
    walls: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for with_breaker in (True, False):
            times, wall = one_run(args.calls, with_breaker)
            handler[with_breaker] += times
            walls[with_breaker].append(wall)
    on, off = statistics.median(handler[True]), statistics.median(handler[False])
    print(f"OpenClaw, {args.rounds} x {args.calls} new tool calls each way ({os.cpu_count()} CPUs)")
    print(f"handler median: {on:.0f} us with the breaker, {off:.0f} us without")
    print(f"added per call (median difference): {on - off:.0f} us")
    print(f"p90 with the breaker: {sorted(handler[True])[int(0.9 * len(handler[True]))]:.0f} us")
    ratio = statistics.median(walls[True]) / statistics.median(walls[False])
    print(f"whole tool-call time, with / without: {ratio:.3f}")


if __name__ == "__main__":
    main()
