"""The real Gemini CLI (`gemini -p`, pinned in tests/e2e/package.json) with the hook that
the installed wheel's `dsh-circuit-breaker install gemini-cli` (tests/support/installed.py)
wrote in ~/.gemini/settings.json of a scratch HOME, against a scripted fake model
speaking the Gemini API on 127.0.0.1 (tests/support/fake_gemini.py).

Each scenario asserts what really ran (a side-effect file the shell commands append to)
and what the model was sent back (the `functionResponse` parts the fake server logged).
Gemini CLI stays offline: an API key and GOOGLE_GEMINI_BASE_URL for the model, usage
statistics, telemetry and update checks off, and HTTPS_PROXY/HTTP_PROXY pointing at a
loopback listener that fails the run if anything tries to reach any other host.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.messages import DEFAULT_MESSAGES, render
from support.fake_gemini import FakeGemini, function_responses_of, tool_call
from support.installed import Installed

GEMINI = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "gemini"
BLOCKED = "Tool execution blocked: Circuit breaker: this run_shell_command call was NOT run."
# The breaker's stop text (defaults: the third refusal in a row, of a duplicate), and what
# Gemini CLI makes of it: the stopping call's result, and the line `gemini -p` ends with.
STOP = (
    "Circuit breaker: this agent is being stopped because it no longer reads the breaker's "
    "answers: it kept calling after its calls were refused (refusals in a row: 3, stop limit: "
    "3; the last one a run_shell_command call, duplicate). None of the refused calls ran. Look "
    "at the transcript for what it kept repeating, then restart it with a changed task or "
    "configuration."
)
STOPPED = "Agent execution stopped by hook: "
STOPPED_LINE = f"Agent execution stopped: {STOPPED}{STOP}"
MODEL = "gemini-2.5-flash"  # named, so the CLI does not first ask a router model to choose
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
# The paths the fake answers: model turns, token counts and the model list.
API_PATHS = (":streamGenerateContent", ":generateContent", ":countTokens", "/v1beta/models")


pytestmark = pytest.mark.timeout(300)  # a run may take up to 240 s (run_group)


@pytest.fixture
def gemini() -> Path:
    require(GEMINI.exists(), "the Gemini CLI (tests/e2e: npm ci)")
    return GEMINI


class Trap:
    """A loopback listener standing in for the proxy: every connection it takes is a
    request that was on its way off this machine."""

    def __init__(self) -> None:
        self.hits: list[bytes] = []
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.2)
        self._open = True
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    def _accept(self) -> None:
        while self._open:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(1)
                try:
                    self.hits.append(connection.recv(200) or b"(connected)")
                except OSError:
                    self.hits.append(b"(connected)")

    def close(self) -> None:
        self._open = False
        self._thread.join(timeout=5)
        self._socket.close()


class Run:
    """Headless Gemini CLI runs in a private HOME, the hook installed by the installed
    wheel's CLI."""

    def __init__(self, installed: Installed, config: dict[str, Any] | None = None) -> None:
        self.home = home = installed.home
        self.work = home / "work"
        self.work.mkdir()
        # Gemini CLI strips a hook's environment to a short list when it runs under GitHub
        # Actions (GITHUB_SHA set) or with security.environmentVariableRedaction on; HOME
        # stays. With the XDG directories at their defaults under HOME, the hook finds the
        # same config and state either way.
        xdg = {"XDG_STATE_HOME": home / ".local" / "state", "XDG_CONFIG_HOME": home / ".config"}
        self.env = {
            k: v
            for k, v in {**installed.env, **{k: str(v) for k, v in xdg.items()}}.items()
            if not k.startswith(("GEMINI_", "GOOGLE_")) and k.upper() not in PROXY_VARS
        }
        if config is not None:
            path = home / ".config" / "dsh-circuit-breaker" / "config.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(config))
        self.settings = home / ".gemini" / "settings.json"
        self.settings.parent.mkdir()
        self.settings.write_text(json.dumps(SETTINGS, indent=2))
        done = installed.run("install", "gemini-cli", env=self.env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"installed in {self.settings}" in done.stdout
        written = json.loads(self.settings.read_text())
        assert {k: written[k] for k in SETTINGS} == SETTINGS  # the rest kept as it was
        # The hook Gemini CLI will run is the installed interpreter, not this checkout's.
        assert str(installed.python) in self.settings.read_text()
        self.python = str(installed.python)
        self.installed = installed
        self.incidents = home / ".local" / "state" / "dsh-circuit-breaker" / "incidents.jsonl"

    def __call__(
        self, model: FakeGemini, prompt: str, *more: str, output: str = "json"
    ) -> dict[str, Any]:
        """One `gemini -p` run; its JSON result (`-o json`), else {}. `self.stdout` and
        `self.stderr` keep what it printed."""
        trap = Trap()
        env = dict(
            self.env,
            GEMINI_API_KEY="fake-gemini-key-for-tests",
            GOOGLE_GEMINI_BASE_URL=model.url,
            GEMINI_CLI_TRUST_WORKSPACE="true",  # what trusting the folder records
            HTTPS_PROXY=trap.url,
            HTTP_PROXY=trap.url,
            NO_PROXY="127.0.0.1",
        )
        try:
            done = run_group(
                [str(GEMINI), "-p", prompt, "--yolo", "-o", output, "-m", MODEL, *more],
                env=env,
                cwd=self.work,
            )
        finally:
            trap.close()
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
        assert model.errors == []
        assert trap.hits == [], "a request tried to leave loopback"
        assert model.paths and all(p.endswith(API_PATHS) for p in model.paths), model.paths
        self.stdout, self.stderr = done.stdout, done.stderr
        result: dict[str, Any] = json.loads(done.stdout) if output == "json" else {}
        return result

    def incident_lines(self) -> list[dict[str, Any]]:
        if not self.incidents.exists():
            return []
        return [json.loads(line) for line in self.incidents.read_text().splitlines()]


PROXY_VARS = {"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY"}


def run_group(
    command: list[str], timeout: float = 240, **options: Any
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` in a process group of its own, all of it killed on a timeout:
    Gemini CLI relaunches itself as a child node process, which outlives its parent."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **options,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def side_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def shell(command: str, description: str) -> dict[str, Any]:
    return tool_call("run_shell_command", {"command": command, "description": description})


def test_probe_six_run_then_blocked(gemini: Path, installed: Installed) -> None:
    # With stopping off, every refusal reaches the model and the run goes on to its end.
    run = Run(installed, {"stopAfterDenials": 0})
    side = run.work / "side.txt"
    calls = [shell(f"echo cbprobe4 >> {side}", f"Probe step {i}") for i in range(1, 11)]
    with FakeGemini([*calls, "All ten probe steps attempted."]) as model:
        output = run(model, "Run the cbprobe4 probe ten times.")
    assert side_lines(side) == ["cbprobe4"] * 6  # six really ran
    ids = [c["id"] for c in model.tool_uses()]
    results = [model.result_in_next_request(i) for i in ids]
    assert [r.is_error for r in results] == [False] * 6 + [True] * 4
    for blocked in results[6:]:
        # The breaker's text, as the error of that call's functionResponse.
        assert blocked.raw["response"] == {"error": blocked.text}
        assert blocked.text.startswith(BLOCKED)
        assert "as often as allowed (runs: 6, limit: 6)" in blocked.text
    assert output["response"] == "All ten probe steps attempted."
    assert STOPPED not in run.stderr
    assert run.incident_lines() == [
        {
            "time": run.incident_lines()[0]["time"],
            "kind": "duplicate",
            "tool": "run_shell_command",
            "count": 6,
            "limit": 6,
            "agent": output["session_id"],  # Gemini CLI's session id reaches the hook
        },
    ]


def test_a_looping_agent_is_stopped(gemini: Path, installed: Installed) -> None:
    # The model repeats one command for ever; text output, as a person at a terminal runs it.
    run = Run(installed)
    side = run.work / "side.txt"
    calls = [shell(f"echo loop >> {side}", f"Loop step {i}") for i in range(1, 21)]
    with FakeGemini([*calls, "Never reached."]) as model:
        run(model, "Run the loop.", output="text")
    assert side_lines(side) == ["loop"] * 6  # six ran; the 7th to 9th did not
    uses = model.tool_uses()
    assert len(uses) == 9 and len(model.model_requests) == 9  # nothing asked after the 9th
    refused = [model.result_in_next_request(c["id"]) for c in uses[6:8]]
    assert [r.text.startswith(BLOCKED) for r in refused] == [True, True]
    assert run.stdout.strip() == ""  # the model wrote no text
    lines = run.stderr.splitlines()
    assert f"Error executing tool run_shell_command: {STOPPED}{STOP}" in lines
    assert lines[-1] == STOPPED_LINE
    duplicate, stop = run.incident_lines()
    assert (duplicate["kind"], stop["kind"], stop["count"]) == ("duplicate", "stop", 3)
    assert duplicate["agent"] == stop["agent"]


CHECK_SCRIPT = """import pathlib
value = pathlib.Path("app.py").read_text().strip()
with open("test-runs.log", "a") as log:
    log.write(value + "\\n")
print("tests passed with", value)
"""


def test_healthy_edit_test_cycle_is_never_denied(gemini: Path, installed: Installed) -> None:
    run = Run(installed)
    app = run.work / "app.py"
    app.write_text("value = 0\n")
    (run.work / "check.py").write_text(CHECK_SCRIPT)
    rounds = 12
    script: list[Any] = [tool_call("read_file", {"file_path": str(app)})]
    for i in range(1, rounds + 1):
        edit = {
            "file_path": str(app),
            "instruction": f"Bump the value to {i} (attempt {i} at fixing the test).",
            "old_string": f"value = {i - 1}",
            "new_string": f"value = {i}",
        }
        script.append(tool_call("replace", edit))
        script.append(shell(f"{sys.executable} check.py", f"Run the tests, round {i}"))
    script.append("All green after twelve rounds.")
    with FakeGemini(script) as model:
        run(model, "Fix the value, test after each edit.")
    results = model.tool_results()
    assert len(results) == 1 + 2 * rounds
    assert [r for r in results if r.is_error] == []
    assert side_lines(run.work / "test-runs.log") == [f"value = {i}" for i in range(1, rounds + 1)]
    assert app.read_text() == f"value = {rounds}\n"
    assert run.incident_lines() == []


SUBAGENT_MARK = "SUBAGENT-TASK: run the loop"


def declared_tools(body: dict[str, Any]) -> set[str]:
    tools = body.get("tools") or []
    return {d["name"] for t in tools for d in t.get("functionDeclarations") or []}


def test_a_subagent_is_keyed_by_its_parents_session(gemini: Path, installed: Installed) -> None:
    # Gemini CLI gives a subagent's BeforeTool events its parent's session_id and nothing
    # naming the subagent: the looping subagent is denied, and its refusals count for the
    # whole session (the limit docs/gemini-cli.md states): the parent repeating the
    # subagent's command right after it is its third refusal in a row, and the run stops.
    run = Run(installed)
    side = run.work / "side.txt"
    loop = f"echo loop >> {side}"

    def respond(body: dict[str, Any]) -> Any:
        done = len(function_responses_of(body))
        if "invoke_agent" not in declared_tools(body):  # a subagent cannot delegate
            if done < 8:
                return shell(loop, f"attempt {done + 1}")
            return tool_call("complete_task", {"result": {"response": "The loop was refused."}})
        if done == 0:
            delegate = {"agent_name": "generalist", "prompt": SUBAGENT_MARK}
            return tool_call("invoke_agent", delegate)
        if done == 1:
            return shell(loop, "the subagent's command, from the parent")
        return shell(f"echo parent >> {side}", "a different command")  # never asked for

    with FakeGemini([], after=respond) as model:
        output = run(model, "PARENT-TASK: delegate the loop, then check.")
    by_description = {u["input"].get("description"): u["id"] for u in model.tool_uses()}
    results = {r.call_id: r for r in model.tool_results()}
    sub = [results[by_description[f"attempt {i}"]] for i in range(1, 9)]
    assert [r.is_error for r in sub] == [False] * 6 + [True] * 2
    assert all(r.text.startswith(BLOCKED) for r in sub[6:])
    delegated = results[next(u["id"] for u in model.tool_uses() if u["name"] == "invoke_agent")]
    # complete_task is exempt: the subagent handed its result back, though it had looped.
    assert not delegated.is_error and "The loop was refused." in delegated.text, delegated
    stopping = by_description["the subagent's command, from the parent"]
    assert model.tool_uses()[-1]["id"] == stopping  # the parent's run ended on it
    assert "a different command" not in by_description
    assert side_lines(side) == ["loop"] * 6
    # -o json prints no stop line; the tool error line on stderr still names the stop.
    assert f"Error executing tool run_shell_command: {STOPPED}{STOP}" in run.stderr
    incident, stop = run.incident_lines()
    assert (incident["kind"], stop["kind"]) == ("duplicate", "stop")
    assert incident["agent"] == stop["agent"] == output["session_id"]  # no subagent part


def test_a_stop_inside_a_subagent_does_not_end_it(gemini: Path, installed: Installed) -> None:
    # Gemini CLI 0.61.0 ends only the main agent's loop on `continue: false`; a subagent
    # gets the stop as the call's error and goes on (to complete_task or its turn limit).
    # The call still never runs, and the parent goes on after the subagent.
    run = Run(installed)
    side = run.work / "side.txt"

    def respond(body: dict[str, Any]) -> Any:
        done = len(function_responses_of(body))
        if "invoke_agent" not in declared_tools(body):
            if done < 12:
                return shell(f"echo loop >> {side}", f"attempt {done + 1}")
            return tool_call("complete_task", {"result": {"response": "Gave up on the loop."}})
        if done == 0:
            return tool_call("invoke_agent", {"agent_name": "generalist", "prompt": SUBAGENT_MARK})
        if done == 1:
            return shell(f"echo parent >> {side}", "a different command")
        return "Parent: done."

    with FakeGemini([], after=respond) as model:
        output = run(model, "PARENT-TASK: delegate the loop, then check.")
    by_description = {u["input"].get("description"): u["id"] for u in model.tool_uses()}
    results = {r.call_id: r for r in model.tool_results()}
    sub = [results[by_description[f"attempt {i}"]] for i in range(1, 13)]
    assert [r.is_error for r in sub] == [False] * 6 + [True] * 6
    assert [r.text.startswith(BLOCKED) for r in sub[6:8]] == [True, True]
    assert sub[8].text == STOPPED + STOP  # what the subagent's model is told instead
    assert all(r.text.startswith(STOPPED + STOP[:60]) for r in sub[9:])
    assert side_lines(side) == ["loop"] * 6 + ["parent"]
    assert not results[by_description["a different command"]].is_error
    assert output["response"] == "Parent: done."
    assert "Agent execution stopped:" not in run.stderr


@pytest.mark.parametrize("reset", [True, False])
def test_a_new_user_prompt_starts_the_session_afresh(
    gemini: Path, installed: Installed, reset: bool
) -> None:
    run = Run(installed, {"resetOnUserPrompt": reset})
    side = run.work / "side.txt"

    def call(i: int) -> dict[str, Any]:
        return shell(f"echo again >> {side}", f"try {i}")

    with FakeGemini([*[call(i) for i in range(7)], "Stuck."]) as first:
        one = run(first, "Keep trying.")
    assert [r.is_error for r in first.tool_results()] == [False] * 6 + [True]
    # The person types a new prompt into the same session (BeforeAgent fires for it).
    with FakeGemini([call(8), call(9), "Done."]) as second:
        two = run(second, "Try it once more, differently.", "--resume", "latest")
    assert two["session_id"] == one["session_id"]
    if reset:
        new = [second.result_in_next_request(c["id"]) for c in second.tool_uses()]
        assert [r.is_error for r in new] == [False, False]
        assert side_lines(side) == ["again"] * 8
    else:  # the count carries over the whole session, and so do the refusals in a row
        assert second.result_in_next_request(second.tool_uses()[0]["id"]).text.startswith(BLOCKED)
        assert len(second.model_requests) == 2  # the second call, the third refusal, stopped
        assert f"{STOPPED}{STOP}" in run.stderr
        assert side_lines(side) == ["again"] * 6


def test_cap_text_reaches_the_model(gemini: Path, installed: Installed) -> None:
    run = Run(installed, {"maxCallsPerAgent": 3, "window": 6})
    side = run.work / "side.txt"
    calls = [shell(f"echo {i} >> {side}", f"step {i}") for i in range(5)]
    with FakeGemini([*calls, "Out of calls."]) as model:
        run(model, "Do five different things.")
    assert side_lines(side) == ["0", "1", "2"]
    results = [model.result_in_next_request(c["id"]) for c in model.tool_uses()]
    assert [r.is_error for r in results] == [False] * 3 + [True] * 2
    for denied in results[3:]:
        assert denied.text.startswith(BLOCKED)
        assert "This agent has used up its tool calls (made: 3, limit: 3)" in denied.text
    (incident,) = run.incident_lines()
    assert (incident["kind"], incident["count"], incident["limit"]) == ("cap", 3, 3)


def test_a_hook_that_cannot_start_never_blocks(gemini: Path, installed: Installed) -> None:
    # The environment the hook was installed from is gone: bash exits 127. Gemini CLI
    # takes any exit status from 2 up as a denial (of the prompt, on BeforeAgent), which
    # the installed command's `|| true` turns back into "no opinion".
    run = Run(installed)
    gone = str(run.home / "removed-venv" / "bin" / "python")
    run.settings.write_text(run.settings.read_text().replace(run.python, gone))
    side = run.work / "side.txt"
    with FakeGemini([shell(f"echo ran >> {side}", "run it"), "Done."]) as model:
        run(model, "Run it once.")
    assert side_lines(side) == ["ran"]
    assert [r.is_error for r in model.tool_results()] == [False]
    doctor = run.installed.run(
        "doctor",
        "gemini-cli",
        env=dict(run.env, PATH=f"{GEMINI.parent}{os.pathsep}{run.env['PATH']}"),
    )
    assert doctor.returncode == 1 and "hook command warned on BeforeTool" in doctor.stdout
    assert gone in doctor.stdout


SEARCH = "google_web_search"
BUDGET_REFUSED = "Tool execution blocked: " + render(
    DEFAULT_MESSAGES["budget"], SEARCH, "budget", 12, 12
)


def search_query(body: dict[str, Any]) -> str | None:
    """The query of a request that Gemini CLI's google_web_search tool made (it asks the
    same API, with the googleSearch tool and the query as the one text), else None."""
    if {"googleSearch": {}} not in (body.get("tools") or []):
        return None
    return str(body["contents"][0]["parts"][0]["text"])


def is_search(body: dict[str, Any]) -> bool:
    return search_query(body) is not None


def search_result(body: dict[str, Any]) -> str:
    return f"Found for {search_query(body)}: nothing new."


def test_a_web_search_budget_refuses_the_thirteenth(gemini: Path, installed: Installed) -> None:
    # The original report's agent had "Budget: 12 web_search calls" in its prompt and made
    # 1,043 searches; here the budget is the breaker's. Every query differs, so only the
    # budget can refuse. A search that runs asks this server (a side request, off-script).
    run = Run(installed, {"toolLimits": {SEARCH: 12}})
    queries = [f"circuit breaker pattern, source {i}" for i in range(1, 14)]
    calls = [tool_call(SEARCH, {"query": q}) for q in queries]
    script = [*calls, "Twelve searches made."]
    with FakeGemini(script, side=is_search, side_reply=search_result) as model:
        output = run(model, "Research the circuit breaker pattern. Budget: 12 web searches.")
    searched = [q for q in map(search_query, model.requests) if q is not None]
    assert searched == queries[:12]  # twelve ran; the 13th never reached the search API
    results = [model.result_in_next_request(c["id"]) for c in model.tool_uses()]
    assert [r.is_error for r in results] == [False] * 12 + [True]
    for query, result in zip(queries[:12], results[:12], strict=True):
        assert result.text.startswith(f'Web search results for "{query}"'), result.text
        assert f"Found for {query}: nothing new." in result.text
    assert results[12].raw["response"] == {"error": BUDGET_REFUSED}
    assert output["response"] == "Twelve searches made."
    (incident,) = run.incident_lines()  # one refusal: no stop (that takes three in a row)
    assert {k: incident[k] for k in ("kind", "tool", "count", "limit", "agent")} == {
        "kind": "budget",
        "tool": SEARCH,
        "count": 12,
        "limit": 12,
        "agent": output["session_id"],
    }
