"""Wall time of one `dsh-circuit-breaker hook` call against `python -c pass`.

A harness starts the hook as a new process for every tool call, so a Python start is
most of its cost; the target is at most 1.4x an empty Python start with the same
interpreter. All commands are measured interleaved in one run, as the median (and 90th
percentile) of N rounds after a warm-up:

- `python -c pass`                the baseline
- `python -c "import _json, _sqlite3, _blake2"` the floor: the C modules a decision
  needs (canonical JSON, SQLite, the digest), with nothing of ours
- hook, allowed                   a tool call with a new call each time (store write)
- hook, denied                    the same call past its limit (store write + output)
- hook, unguarded tool            the harness's first exempt tool (Claude Code's
  TodoWrite): no store opened
- hook via the console script     the allowed case through pip's `dsh-circuit-breaker`
  wrapper, which imports `re` first: why `install` writes `python -c ...` instead

With `--results`, three rows more, each with a config file (reading one imports `json`,
and with it `re`, whatever the file says):

- hook, allowed, results off      the allowed case, `resultProgress = false`
- hook, allowed, results on       the same with `resultProgress = true` (docs/results.md),
  which is when `install` adds the post-tool hook (the call also notes a result is due)
- hook, post-tool result          the harness's post-tool event for that call: a second
  process per tool call, the extra cost of results where the harness has no HTTP hook

With `--otel`, two rows more, with OpenTelemetry export on (OTEL_EXPORTER_OTLP_ENDPOINT
naming a collector on 127.0.0.1 that this program runs, answering every export at once):

- hook, allowed, export on        the allowed case: nothing of OpenTelemetry is loaded
- hook, denied, export on         the denied case: the SDK is imported and the event sent
                                  before the process exits

The hook rows run exactly the command `install NAME` writes (harnesses/_settings.py) for
`--harness NAME` (default claude-code), on events in that harness's own shape (built from
its doctor probe event).

Bytecode is cached for every command alike (PYTHONPYCACHEPREFIX in a temp dir), as an
installed wheel has it; with PYTHONDONTWRITEBYTECODE and an editable install every hook
would recompile the package each time.

    .venv/bin/python bench/hook_latency.py [--rounds 200] [--harness gemini-cli] [--results]
        [--otel]
"""

from __future__ import annotations

import argparse
import http.server
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _scratch import scratch_env  # bench/ is on the path when a bench runs
from dsh_circuit_breaker.core.config import DEFAULT_EXEMPT
from dsh_circuit_breaker.core.invocation import DEFAULT_HARNESS, hook_command
from dsh_circuit_breaker.harnesses import HARNESSES, load
from dsh_circuit_breaker.judge import Call, Outcome

ENTRY = Path(sys.executable).parent / "dsh-circuit-breaker"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--harness", choices=list(HARNESSES), default=DEFAULT_HARNESS)
    parser.add_argument("--results", action="store_true", help="add the post-tool rows")
    parser.add_argument("--otel", action="store_true", help="add the OpenTelemetry rows")
    args = parser.parse_args()
    harness = load(args.harness)
    hook = shlex.split(hook_command(harness=args.harness))
    event = _event_maker(harness)
    exempt = (*harness.EXEMPT, *DEFAULT_EXEMPT)[0]

    with tempfile.TemporaryDirectory(prefix="cb-bench-") as tmp:
        env = scratch_env(tmp, PYTHONPYCACHEPREFIX=f"{tmp}/pycache")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        counter = iter(range(10**9))

        def allowed() -> bytes:
            n = next(counter)
            return event(f"session-{n % 8}", {"command": f"pytest -k case_{n}"})

        repeated = event("looper", {"command": "echo cbprobe4"})
        todo = event("session-0", {"todos": []}, exempt)
        cases = {
            "python -c pass": ([sys.executable, "-c", "pass"], lambda: b""),
            "python -c 'import _json, _sqlite3, _blake2'": (
                [sys.executable, "-c", "import _json, _sqlite3, _blake2"],
                lambda: b"",
            ),
            "hook, allowed (new call)": (hook, allowed),
            "hook, denied (repeat past limit)": (hook, lambda: repeated),
            f"hook, unguarded tool ({exempt})": (hook, lambda: todo),
            "hook via the console script": ([str(ENTRY), *hook[hook.index("hook") :]], allowed),
        }
        if args.results:
            cases.update(_results_cases(harness, args.harness, event, Path(tmp)))
        envs = dict.fromkeys(cases, env)
        if args.otel:
            collector = _collector()
            otel_env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": collector}
            cases["hook, allowed, export on"] = (hook, allowed)
            cases["hook, denied, export on"] = (hook, lambda: repeated)
            envs.update(dict.fromkeys(list(cases)[-2:], otel_env))
        times: dict[str, list[float]] = {name: [] for name in cases}
        for round_ in range(args.warmup + args.rounds):
            for name, (command, payload) in cases.items():
                data = payload()
                started = time.perf_counter()
                done = subprocess.run(command, input=data, env=envs[name], capture_output=True)
                elapsed = time.perf_counter() - started
                if done.returncode != 0 or done.stderr:
                    raise SystemExit(f"{name} failed: {done.returncode} {done.stderr!r}")
                if round_ >= args.warmup:
                    times[name].append(elapsed * 1000)
        denied = subprocess.run(hook, input=repeated, env=env, capture_output=True).stdout
        # Each harness's refusal: a deny, or Hermes's block.
        assert b'"deny"' in denied or b'"block"' in denied, "the repeated call should be denied"

    base = statistics.median(times["python -c pass"])
    print(f"harness: {args.harness}; interpreter: {sys.executable} ({sys.version.split()[0]})")
    print(f"rounds: {args.rounds} (after {args.warmup} warm-up), interleaved\n")
    print(f"{'command':<36} {'median ms':>10} {'p90 ms':>8} {'x baseline':>11}")
    for name, values in times.items():
        values.sort()
        median = statistics.median(values)
        p90 = values[int(len(values) * 0.9) - 1]
        print(f"{name:<36} {median:>10.2f} {p90:>8.2f} {median / base:>10.2f}x")
    hook_median = statistics.median(times["hook, allowed (new call)"])
    extra = hook_median - base
    ratio = hook_median / base
    print(f"\nhook (allowed) over baseline: +{extra:.2f} ms, {ratio:.2f}x (target <= 1.4x)")
    if args.otel:
        for case in ("allowed", "denied"):
            plain = (
                "hook, allowed (new call)"
                if case == "allowed"
                else "hook, denied (repeat past limit)"
            )
            extra = statistics.median(times[f"hook, {case}, export on"]) - statistics.median(
                times[plain]
            )
            print(f"OpenTelemetry export on, {case}: {extra:+.2f} ms against export off")
    if args.results:
        off = statistics.median(times["hook, allowed, results off"])
        pre = statistics.median(times["hook, allowed, results on"]) - off
        post = statistics.median(times["hook, post-tool result"])
        print(f"results on: {pre + post:+.2f} ms per tool call (the post-tool hook, {post:.2f} ms,")
        print(f"  and {pre:+.2f} ms in the pre-tool hook against results off)")
    return 0


def _results_cases(
    harness: Any, name: str, event: Callable[..., bytes], tmp: Path
) -> dict[str, tuple[list[str], Callable[[], bytes]]]:
    """The pre-tool hook with results on, and the post-tool event of the call it just
    allowed, each a new call: what a tool call costs with the post-tool hook installed."""
    commands = {}
    for on in (False, True):
        config = tmp / f"results-{on}.json"
        config.write_text(json.dumps({"resultProgress": on}))
        commands[on] = shlex.split(hook_command(str(config), harness=name))
    post = harness.POST_EVENTS[0]
    counter = iter(range(10**9))
    last: dict[str, Any] = {}

    def allowed() -> bytes:
        n = next(counter)
        last.update(session=f"session-{n % 8}", tool_input={"command": f"gh run view {n}"})
        return event(last["session"], last["tool_input"])

    def outcome() -> bytes:
        done = json.loads(event(last["session"], last["tool_input"]))
        if "hook_event_name" in done:  # Claude Code's shape, Gemini CLI's, Kimi CLI's, Hermes's
            done.update(hook_event_name=post, tool_response={"llmContent": "run 7: 40% done"})
            done["tool_output"] = "is_error=False output='run 7: 40% done' message=''"
            done["extra"] = {"result": '{"output": "run 7: 40% done"}', "status": "ok"}  # Hermes
        elif "event_type" in done:  # the OpenHands SDK's (the OpenHands CLI)
            text = [{"type": "text", "text": "run 7: 40% done"}]
            done.update(event_type=post, tool_response={"content": text, "is_error": False})
        else:  # Copilot's, which names no event
            done["toolResult"] = {"resultType": "success", "textResultForLlm": "run 7: 40% done"}
        assert isinstance(harness.parse(done), Outcome), done
        return json.dumps(done).encode()

    return {
        "hook, allowed, results off": (commands[False], allowed),
        "hook, allowed, results on": (commands[True], allowed),
        "hook, post-tool result": (commands[True], outcome),
    }


def _collector() -> str:
    """An OTLP/HTTP endpoint on 127.0.0.1 that takes every export at once (a collector's
    fastest answer: what is measured is the hook's side)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def _event_maker(harness: Any) -> Callable[..., bytes]:
    """`event(session, tool_input, tool=<its shell tool>)`: a tool call event in the
    harness's own shape, its doctor probe's call with the session, input and tool put in."""
    probe = next(e for e in harness.probe_events("bench") if isinstance(harness.parse(e), Call))
    call = harness.parse(probe)
    session_key = next(k for k, v in probe.items() if v == "bench")
    tool_key = next(k for k, v in probe.items() if v == call.tool)
    input_key = next(k for k, v in probe.items() if v == call.arguments)

    def event(session: str, tool_input: dict[str, object], tool: str = call.tool) -> bytes:
        fields = {session_key: session, tool_key: tool, input_key: tool_input}
        return json.dumps({**probe, **fields}).encode()

    return event


if __name__ == "__main__":
    sys.exit(main())
