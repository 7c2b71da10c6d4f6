"""The figures of issue 11 (hardening), measured against what users run.

    .venv/bin/python bench/hardening.py [--only NAME ...]

Each line is one figure: what was measured, the number, and the bound it must meet.

- redis-trickle     a server answering one byte every 0.5 s (a valid record), storeTimeout 1 s:
                    the decision's wall time
- redis-10GB-bulk   GET answered `$10000000000` then bytes as fast as loopback goes: wall
                    time, bytes the client took, growth of this process's peak RSS
- redis-array       GET answered `*999999999` then `:1` elements: the same
- breaker-1e7       CircuitBreaker(Config(duplicateLimit=10**7, window=10**7)): build time
- sqlite-1M-expired one decision on a file holding 1,000,000 expired agents: its time (the
                    write lock is held for all of it), then 16 hook processes at once on a
                    fresh copy of that file, storeTimeout 0.5 s: how many gave up waiting
                    ("database is locked")
- deny-spec         Config(denyMessage="{tool:*^2000000000}"): time to refuse it
- yaml-bomb         a 411-byte YAML alias bomb as the hook's --config: hook wall time and
                    the length of its stderr
- serve-1e7         `serve --stdio` hello with duplicateLimit 1e7: time to the reply
- serve-512MiB      `serve --stdio` held to 256 MiB of address space, fed one 512 MiB line
                    then a ping: time to both replies, and whether the guard lived
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from dsh_circuit_breaker import CircuitBreaker, Config, ConfigError  # noqa: E402
from dsh_circuit_breaker.core.state import AgentState  # noqa: E402

HOOK = [sys.executable, "-m", "dsh_circuit_breaker.cli", "hook"]
_EVENT = json.dumps(
    {"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash",
     "tool_input": {"command": "ls"}}
).encode()  # fmt: skip
SERVE = [sys.executable, "-m", "dsh_circuit_breaker.cli", "serve", "--stdio"]


def report(name: str, text: str) -> None:
    print(f"{name:18} {text}", flush=True)


def redis_trickle() -> None:
    from support.hostile_redis import HostileRedis, bulk, replacing, trickled

    record = bulk(AgentState().dumps())
    with HostileRedis(trickled(replacing(b"GET", record), only=b"GET"), pace=0.5) as server:
        breaker = CircuitBreaker(Config(store_timeout=1.0), state=server.url)
        started = time.monotonic()
        decision = breaker.check("a", "t", {})
        elapsed = time.monotonic() - started
        breaker.close()
    report("redis-trickle", f"{elapsed:.3f} s (budget 1.0 s), allowed={decision.allowed}")


def _endless(name: str, header: bytes, filler: bytes) -> None:
    from support.hostile_redis import HostileRedis, endless

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with HostileRedis(endless(header, filler), cap=1 << 40) as server:
        breaker = CircuitBreaker(Config(store_timeout=2.0), state=server.url)
        started = time.monotonic()
        breaker.check("a", "t", {})
        elapsed = time.monotonic() - started
        breaker.close()
        time.sleep(0.2)
        sent = server.sent
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    report(name, f"{elapsed:.3f} s, client took {sent / 1e6:.2f} MB, peak RSS +{grown:.0f} MiB")


def breaker_1e7() -> None:
    started = time.perf_counter()
    CircuitBreaker(Config(duplicate_limit=10**7, window=10**7))
    report("breaker-1e7", f"{(time.perf_counter() - started) * 1e6:.0f} us to build")


def sqlite_expired(tmp: Path) -> None:
    path = tmp / "state.db"
    CircuitBreaker(Config(), state=f"sqlite:///{path}").check("first", "t", {})
    record, long_ago = AgentState().dumps(), time.time() - 14 * 86400
    db = sqlite3.connect(path)
    rows = ((f"gone-{i}", long_ago, record) for i in range(1_000_000))
    db.executemany("INSERT INTO agents VALUES (?, ?, ?)", rows)
    db.commit()
    db.close()  # the last connection: the WAL is checkpointed into the file
    pristine = tmp / "pristine.db"
    shutil.copy(path, pristine)
    breaker = CircuitBreaker(Config(), state=f"sqlite:///{path}")
    started = time.perf_counter()
    breaker.check("a", "t", {})
    one = time.perf_counter() - started
    breaker.close()
    shutil.copy(pristine, path)
    for side in ("-wal", "-shm"):
        Path(f"{path}{side}").unlink(missing_ok=True)
    config = tmp / "budget.json"
    config.write_text('{"storeTimeout": 0.5}')
    procs = [
        subprocess.Popen(
            [*HOOK, "--state", f"sqlite:///{path}", "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(16)
    ]
    for proc in procs:  # every hook has its event before any is waited for
        assert proc.stdin is not None
        proc.stdin.write(_EVENT)
        proc.stdin.close()
        proc.stdin = None  # so communicate() leaves it alone
    outs = [proc.communicate(timeout=120) for proc in procs]
    locked = sum(b"locked" in err for _, err in outs)
    report(
        "sqlite-1M-expired",
        f"one decision {one * 1000:.1f} ms; 16 concurrent hooks (storeTimeout 0.5 s): "
        f"{locked} 'database is locked'",
    )


def deny_spec() -> None:
    started = time.perf_counter()
    try:
        Config(deny_message="{tool:*^2000000000}")
    except ConfigError as exc:
        elapsed = time.perf_counter() - started
        report("deny-spec", f"refused in {elapsed * 1e3:.2f} ms: {exc}")


def yaml_bomb(tmp: Path) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    path = tmp / "bomb.yaml"
    path.write_text("\n".join(lines) + "\nexempt: *i\n")
    started = time.monotonic()
    done = subprocess.run(
        [*HOOK, "--config", str(path)], input=_EVENT, capture_output=True,
        timeout=300, env={**os.environ, "XDG_STATE_HOME": str(tmp / "state")},
    )  # fmt: skip
    elapsed = time.monotonic() - started
    report(
        "yaml-bomb",
        f"{path.stat().st_size} bytes: hook {elapsed:.2f} s, stderr {len(done.stderr)} bytes",
    )


def serve_1e7() -> None:
    hello = {"op": "hello", "id": 1, "config": {"duplicateLimit": 10**7, "window": 10**7}}
    started = time.monotonic()
    done = subprocess.run(
        SERVE, input=json.dumps(hello).encode() + b"\n", capture_output=True, timeout=300
    )
    elapsed = time.monotonic() - started
    ok = json.loads(done.stdout)["ok"]
    report("serve-1e7", f"hello answered ok={ok}, process done in {elapsed:.2f} s")


def serve_512mib() -> None:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (256 << 20, 256 << 20))

    proc = subprocess.Popen(
        SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=limit,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    started = time.monotonic()
    try:
        proc.stdin.write(b'{"op":"check","tool":"Write","arguments":{"content":"')
        chunk = b"x" * (1 << 20)
        for _ in range(512):
            proc.stdin.write(chunk)
        proc.stdin.write(b'"},"id":7}\n{"op":"ping","id":8}\n')
        proc.stdin.close()
    except BrokenPipeError:
        pass
    out = proc.stdout.read()
    proc.wait(timeout=60)
    elapsed = time.monotonic() - started
    err = proc.stderr.read() if proc.stderr else b""
    report(
        "serve-512MiB",
        f"{elapsed:.2f} s, exit {proc.returncode}, replies {out.decode().splitlines()}, "
        f"traceback={b'Traceback' in err}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dshcb-hardening-"))
    figures: dict[str, Callable[[], None]] = {
        "redis-trickle": redis_trickle,
        "redis-10GB-bulk": lambda: _endless("redis-10GB-bulk", b"$10000000000\r\n", b"x"),
        "redis-array": lambda: _endless("redis-array", b"*999999999\r\n", b":1\r\n"),
        "breaker-1e7": breaker_1e7,
        "sqlite-1M-expired": lambda: sqlite_expired(tmp),
        "deny-spec": deny_spec,
        "yaml-bomb": lambda: yaml_bomb(tmp),
        "serve-1e7": serve_1e7,
        "serve-512MiB": serve_512mib,
    }
    try:
        for name, measure in figures.items():
            if args.only is None or name in args.only:
                measure()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
