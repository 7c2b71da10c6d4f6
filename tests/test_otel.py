"""OpenTelemetry export (the `otel` extra, docs/observability.md): the real SDK sends OTLP/HTTP
to a collector in the test (support/otlp_collector.py, decoding with the official
opentelemetry-proto messages), from every kind of transport:

- a command hook's refusals and its stop, one `gen_ai.guardrail.result` event each;
- the HTTP guard (`serve --http`): the events, and the decision metrics under the names
  its /metrics has;
- the stdio MCP relay, with the request's JSON-RPC id as the call id;
- a framework (LangChain's example program against a scripted model);
- a collector that is down or slow changes no decision, costs a refused call less than the
  bound, and is said once.

No payload holds any argument text.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from hook_support import HOOK_COMMAND, hook_env, pre_tool_use
from sandbox import scratch_env
from support.guard_service import Service, metric_samples
from support.otlp_collector import Collector, otel_env
from support.streams import readline

pytestmark = pytest.mark.timeout(120)

SECRET = "sk-argument-text-7f3a9c"  # in every call's arguments; never in an export
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SDK_SERVER = Path(__file__).parent / "support" / "mcp_echo_server.py"
CLI = [sys.executable, "-m", "dsh_circuit_breaker.cli"]


def write_config(home: Path, **keys: Any) -> Path:
    path = home / "loop-guard.json"
    path.write_text(json.dumps({"duplicateLimit": 2, "stopAfterDenials": 2, **keys}))
    return path


def hook(event: dict[str, Any], env: dict[str, str]) -> tuple[bool, float, str]:
    """(denied, seconds, stderr) of one command-hook process."""
    started = time.perf_counter()
    done = subprocess.run(
        HOOK_COMMAND,
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return '"deny"' in done.stdout, time.perf_counter() - started, done.stderr


def no_secret(collector: Collector) -> None:
    assert collector.raw, "nothing was exported"
    for body in collector.raw:
        assert SECRET.encode() not in body


def test_command_hook_refusals_and_its_stop_are_events(tmp_path: Path) -> None:
    with Collector() as collector:
        env = hook_env(
            tmp_path,
            DSH_CIRCUIT_BREAKER_CONFIG=str(write_config(tmp_path)),
            **otel_env(collector.endpoint),
        )
        event = pre_tool_use("Bash", {"command": f"echo {SECRET}"}, session="sess-otel")
        denied = [hook(event, env)[0] for _ in range(5)]
        refusals = denied.count(True)
        assert denied[0] is False and refusals >= 2, denied
        events = collector.events()
    assert len(events) == refusals  # every refusal, each once; no allowed call
    first, *_, last = events
    common = {
        "gen_ai.guardrail.component.name": "dsh-circuit-breaker",
        "gen_ai.guardrail.source": "tool_input",
        "gen_ai.guardrail.result.type": "decision",
        "gen_ai.guardrail.policy.id": "duplicate",
        "gen_ai.guardrail.policy.rule.id": "duplicateLimit",
        "gen_ai.tool.name": "Bash",
        "gen_ai.tool.call.id": "toolu_01",
        "gen_ai.agent.id": "sess-otel",
        "gen_ai.conversation.id": "sess-otel",
        "dsh_circuit_breaker.harness": "claude-code",
        "dsh_circuit_breaker.kind": "duplicate",
        "dsh_circuit_breaker.limit": 2,
        "dsh_circuit_breaker.stop_after_denials": 2,
    }
    assert first.items() >= {**common, "gen_ai.guardrail.result.value": "deny"}.items(), first
    assert first["dsh_circuit_breaker.denials"] == 1
    assert last.items() >= {**common, "gen_ai.guardrail.result.value": "stop"}.items(), last
    assert last["dsh_circuit_breaker.denials"] == refusals
    assert first["resource"]["service.name"] == "loop-guard-test"  # OTEL_SERVICE_NAME
    no_secret(collector)


def test_a_subagent_is_its_own_agent_in_its_sessions_conversation(tmp_path: Path) -> None:
    with Collector() as collector:
        env = hook_env(
            tmp_path,
            DSH_CIRCUIT_BREAKER_CONFIG=str(write_config(tmp_path)),
            **otel_env(collector.endpoint),
        )
        event = pre_tool_use("Read", {"file_path": SECRET}, session="s-1", agent_id="sub-9")
        while not hook(event, env)[0]:
            pass
        events = collector.events()
    assert [(e["gen_ai.agent.id"], e["gen_ai.conversation.id"]) for e in events] == [
        ("s-1/sub-9", "s-1")
    ]


@pytest.mark.parametrize("collector_state", ["down", "slow"])
def test_a_collector_down_or_slow_changes_no_decision_and_costs_under_the_bound(
    tmp_path: Path, collector_state: str
) -> None:
    """The bound is min(storeTimeout, 0.5 s) of waiting per refused call (telemetry.py);
    the allowance over it is the SDK's import and a Python start on a busy machine."""
    config = write_config(tmp_path)
    event = pre_tool_use("Bash", {"command": f"echo {SECRET}"})
    quiet = hook_env(tmp_path / "quiet", DSH_CIRCUIT_BREAKER_CONFIG=str(config))
    expected = [hook(event, quiet)[0] for _ in range(5)]
    with Collector(delay=5.0) as slow:
        endpoint = slow.endpoint if collector_state == "slow" else "http://127.0.0.1:9"
        env = hook_env(
            tmp_path / "otel", DSH_CIRCUIT_BREAKER_CONFIG=str(config), **otel_env(endpoint)
        )
        runs = [hook(event, env) for _ in range(5)]
    assert [denied for denied, _, _ in runs] == expected
    for denied, seconds, stderr in runs:
        if denied:
            assert seconds < 0.5 + 3.0, seconds
        # At most one line, never a traceback; nothing at all from an allowed call.
        assert stderr.count("\n") <= (1 if denied else 0) and "Traceback" not in stderr, stderr
    # Said once, by the first process that could not send, not by every refused call.
    said = [stderr for _, _, stderr in runs if "OpenTelemetry collector" in stderr]
    assert len(said) == 1, [stderr for _, _, stderr in runs]
    assert "dropped (said once an hour)" in said[0]


def test_the_http_guard_exports_events_and_metrics(tmp_path: Path) -> None:
    with Collector() as collector:
        env = hook_env(
            tmp_path,
            DSH_CIRCUIT_BREAKER_CONFIG=str(write_config(tmp_path)),
            **otel_env(collector.endpoint),
        )
        with Service(env) as service:
            event = pre_tool_use("Bash", {"command": f"echo {SECRET}"}, session="http-1")
            answers = [service.hook(event) for _ in range(5)]
            refusals = sum(b'"deny"' in a for a in answers)
            assert refusals >= 2
            prometheus = metric_samples(service.metrics())

            def exported() -> bool:
                sums = collector.sums()
                return (
                    sums.get(("dsh_circuit_breaker.stops", labels("claude-code", "duplicate")))
                    == refusals - 1
                )

            assert collector.wait(exported), collector.sums()
            assert collector.wait(lambda: len(collector.events()) == refusals)
        events = collector.events()
        sums = collector.sums()
    assert {e["dsh_circuit_breaker.harness"] for e in events} == {"claude-code"}
    assert [e["gen_ai.guardrail.result.value"] for e in events] == ["deny"] + ["stop"] * (
        refusals - 1
    )
    allowed = 5 - refusals
    assert sums[("dsh_circuit_breaker.decisions", labels("claude-code", "allow"))] == allowed
    assert sums[("dsh_circuit_breaker.decisions", labels("claude-code", "duplicate"))] == refusals
    assert sums[("dsh_circuit_breaker.denials", labels("claude-code", "duplicate"))] == refusals
    assert sums[("dsh_circuit_breaker.decision", frozenset({("harness", "claude-code")}))] == 5
    assert sums[("dsh_circuit_breaker.agents_tracked", frozenset())] == 1  # the store's
    # The same counts as the guard's own /metrics.
    decisions = "dsh_circuit_breaker_decisions_total"
    assert prometheus[(decisions, (("harness", "claude-code"), ("kind", "allow")))] == allowed
    no_secret(collector)


def labels(harness: str, kind: str) -> frozenset[tuple[str, str]]:
    return frozenset({("harness", harness), ("kind", kind)})


def test_the_stdio_mcp_relay_exports_its_refusals(tmp_path: Path) -> None:
    require(importlib_find("mcp"), "the mcp SDK (extra [mcp])")
    with Collector() as collector:
        env = hook_env(
            tmp_path,
            DSH_CIRCUIT_BREAKER_CONFIG=str(write_config(tmp_path)),
            **otel_env(collector.endpoint),
        )
        relay = subprocess.Popen(
            [*CLI, "mcp", "--", sys.executable, str(SDK_SERVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert relay.stdin is not None and relay.stdout is not None
        try:
            ask(relay, initialize())
            send(relay, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            answers = [ask(relay, echo_call(n)) for n in range(1, 6)]
            refused = [a["id"] for a in answers if a["result"].get("isError")]
            assert len(refused) >= 2, answers
            assert collector.wait(lambda: len(collector.events()) == len(refused))
        finally:
            relay.stdin.close()
            relay.wait(timeout=30)
        events = collector.events()
        assert relay.stderr is not None
        stderr = relay.stderr.read().decode()
    assert [e["gen_ai.tool.call.id"] for e in events] == [str(n) for n in refused]
    assert {e["dsh_circuit_breaker.harness"] for e in events} == {"mcp"}
    assert {e["gen_ai.tool.name"] for e in events} == {"echo"}
    assert events[-1]["gen_ai.guardrail.result.value"] == "stop"
    assert sum(e["gen_ai.guardrail.result.value"] == "deny" for e in events) == 1
    assert "Traceback" not in stderr
    no_secret(collector)


def importlib_find(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def send(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()


def ask(process: subprocess.Popen[bytes], message: dict[str, Any]) -> dict[str, Any]:
    send(process, message)
    assert process.stdout is not None
    while True:
        line = readline(process.stdout, 30)
        assert line, "the relay closed its stdout"
        answer: dict[str, Any] = json.loads(line)
        if answer.get("id") == message["id"] and "method" not in answer:
            return answer


def initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "otel-client", "version": "1"},
        },
    }


def echo_call(n: int) -> dict[str, Any]:
    params = {"name": "echo", "arguments": {"message": SECRET}}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def test_a_framework_exports_events_and_metrics(tmp_path: Path) -> None:
    require(importlib_find("langchain"), "langchain (extra [langchain])")
    require(importlib_find("langchain_anthropic"), "langchain-anthropic")
    from support.fake_anthropic import FakeAnthropic, tool_use

    calls = [tool_use("search", {"query": SECRET}) for _ in range(10)]
    (tmp_path / "home").mkdir()
    with Collector() as collector, FakeAnthropic([*calls, "Done."]) as fake:
        env = scratch_env(
            tmp_path / "home",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY="sk-ant-fake",
            **otel_env(collector.endpoint),
        )
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "langchain_example.py")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.splitlines()[-1].startswith("stopped:"), done.stdout
        events = collector.events()
        sums = collector.sums()
    # The example runs the defaults: refused until the stop, stopAfterDenials (3) in a row.
    values = [e["gen_ai.guardrail.result.value"] for e in events]
    assert values == ["deny", "deny", "stop"], values
    assert {e["dsh_circuit_breaker.harness"] for e in events} == {"langchain"}
    assert {e["gen_ai.tool.name"] for e in events} == {"search"}
    assert sums[("dsh_circuit_breaker.stops", labels("langchain", "duplicate"))] == 1
    assert sums[("dsh_circuit_breaker.denials", labels("langchain", "duplicate"))] == 3
    no_secret(collector)


def test_enabled_follows_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh_circuit_breaker.core.telemetry import enabled

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name in ("OTEL_SDK_DISABLED", "OTEL_LOGS_EXPORTER", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    assert not enabled("LOGS")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://127.0.0.1:9/v1/logs")
    assert enabled("LOGS") and not enabled("METRICS")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    assert enabled("METRICS")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    assert enabled("LOGS") and not enabled("METRICS")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "True")
    assert not enabled("LOGS")


def test_attributes_name_no_argument_and_bound_every_text() -> None:
    from dsh_circuit_breaker import CircuitBreaker, Config
    from dsh_circuit_breaker.core.telemetry import MAX_TEXT, attributes

    config = Config(duplicate_limit=2)
    breaker = CircuitBreaker(config, export=False)
    tool = "t" * 10_000
    breaker.check("agent", tool, {"secret": SECRET})
    decision = breaker.check("agent", tool, {"secret": SECRET})
    assert not decision.allowed

    class Anonymous:  # an agent object without an id: no agent attributes at all
        pass

    found = attributes("python", Anonymous(), tool, "c" * 999, decision, 1, config)
    assert SECRET not in repr(found)
    assert len(found["gen_ai.tool.name"]) == len(found["gen_ai.tool.call.id"]) == MAX_TEXT
    assert "gen_ai.agent.id" not in found and "gen_ai.conversation.id" not in found
    assert found["gen_ai.guardrail.result.value"] == "deny"
