"""The real command-hook harness CLIs (Claude Code, Codex, Gemini CLI, Qwen Code, Factory
droid, GitHub Copilot CLI; pinned in tests/e2e/package.json; Kimi CLI, Mistral Vibe, Hermes
Agent and the OpenHands CLI, from PyPI, pinned in tests/e2e/python/ and installed by
scripts/setup into a venv of their own) run headless in a scratch HOME with the hook that the
installed wheel's `dsh-circuit-breaker install NAME` wrote (support/installed.py), against a
scripted fake model on 127.0.0.1 (support/fake_*.py).

One `Harness` subclass per harness says only what differs: how to run its CLI offline
against the fake, which fake API it speaks, where its settings go, how it writes a shell
call (and an edit, a read, a delegation to a subagent), and how to read its result. The
scenarios, written once, are in tests/test_command_hook_e2e.py; the few tests that make
sense for one harness only are in tests/test_command_hook_quirks.py. Whether a harness
can end an agent from its hook is read from its captured events: a `stop.json` in
tests/fixtures/harness-events/NAME (the same file tests/test_harness_contract.py uses).

Each harness stays offline: its own telemetry, update checks and model discovery off,
the model on 127.0.0.1; the fake must see every model request.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from support.fake_anthropic import FakeAnthropic
from support.fake_gemini import FakeGemini
from support.fake_openai import FakeOpenAI
from support.harness_run import json_lines
from support.installed import Installed
from support.scripted_server import Block, ScriptedServer, text, tool_call

TESTS = Path(__file__).resolve().parents[1]
E2E_BIN = TESTS / "e2e" / "node_modules" / ".bin"
# A Python agent's CLI: scripts/setup installs tests/e2e/python/NAME.txt into agent-NAME.
AGENT_PINS = TESTS / "e2e" / "python"
AGENT_VENVS = TESTS.parent / ".installed"
EVENTS = TESTS / "fixtures" / "harness-events"


@dataclass
class Outcome:
    """One finished headless run."""

    stdout: str
    stderr: str
    result: dict[str, Any] = field(default_factory=dict)  # its final JSON result, if any
    events: list[dict[str, Any]] = field(default_factory=list)  # its JSON event stream
    session: str | None = None  # the session id it ran under, as it printed it
    final: str | None = None  # the model's final text, as it printed it


@dataclass(frozen=True)
class Subagent:
    """How the parent delegates to a subagent, and how the fake tells a subagent's
    request from its parent's."""

    delegate: Callable[[str], Block]  # the call that starts a subagent with that prompt
    is_child: Callable[[dict[str, Any]], bool]  # a request body of the subagent's?
    # The incident's agent key is the subagent's own: a check of it, given the run.
    own_key: Callable[[str, Outcome], bool]


class Harness:
    """One command-hook harness in a scratch HOME, the hook installed by the installed
    wheel's CLI; `run()` runs its CLI headless against a fake model."""

    name: ClassVar[str]  # `install NAME`, a key of harnesses.HARNESSES
    executable: ClassVar[str]  # in tests/e2e/node_modules/.bin
    fake: ClassVar[type[ScriptedServer]]  # the model API it speaks
    shell_tool: ClassVar[str]  # its shell tool's name, as the hook sees it (and the model)
    # What it puts before the breaker's text in a refused call's result.
    refusal_prefix: ClassVar[str] = ""
    # True: a refused call's result is that prefix and the breaker's text, nothing more.
    whole_refusal: ClassVar[bool] = False
    last_stderr = ""  # the last run's stderr, for a failing check to show (the hook warns there)
    # True: the API has an error flag on a tool result, and a refusal sets it.
    flags_errors: ClassVar[bool] = False
    # Environment variable prefixes of the user's own session, kept out of the run.
    env_prefixes: ClassVar[tuple[str, ...]] = ()
    timeout: ClassVar[float] = 240  # seconds one run may take
    # Extra flags for a run the breaker stops (text output, as a person runs it).
    stop_flags: ClassVar[tuple[str, ...]] = ()
    # Why it is not in a shared scenario: scenario -> reason (each a pinned-down limit).
    not_in: ClassVar[dict[str, str]] = {}
    subagent: ClassVar[Subagent | None] = None

    def __init__(self, installed: Installed, cache: Path) -> None:
        self.installed = installed
        self.cache = cache  # shared by the tests of a session (e.g. unpacked binaries)
        self.home = installed.home
        self.work = self.home / "work"
        self.work.mkdir()
        self.env = {k: v for k, v in installed.env.items() if not k.startswith(self.env_prefixes)}
        self.setup()

    # -- what each harness says ----------------------------------------------------
    def setup(self) -> None:
        """Its settings before our install (what a user already has), then our install,
        checked: the hook it will run is the installed interpreter, not this checkout's."""
        raise NotImplementedError

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        raise NotImplementedError

    def run_env(self, model: Any) -> dict[str, str]:
        return self.env

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        """Check a finished run went well and read what it printed."""
        raise NotImplementedError

    def shell(self, command: str, label: str) -> Block:
        """A shell call as its model writes it: `label` goes into the arguments the model
        rewrites on every call (a description, a summary), where it has them."""
        return tool_call(self.shell_tool, {"command": command, "description": label})

    def read_call(self, path: Path) -> Block:
        raise NotImplementedError

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        raise NotImplementedError

    def resume(self, outcome: Outcome) -> list[str]:
        """Flags that run the next prompt in the session of `outcome`."""
        raise NotImplementedError

    def stop_shown(self, outcome: Outcome) -> list[str]:
        """Where the run kept the breaker's stop reason (transcript notes, stderr lines)."""
        raise NotImplementedError

    def ended_by_stop(self, outcome: Outcome) -> bool | None:
        """Whether the run's own result says a hook stopped it (None: it does not say)."""
        return None

    # Harness-specific checks of a shared scenario (the default: none).
    def check_denials(self, outcome: Outcome, refused: list[str]) -> None:
        """After any run: `refused`, the ids of the calls the model was told were refused."""

    def check_stopped(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        """After a stop at the 8th call (`calls`: the calls made)."""

    def check_went_on(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        """After a run with refusals and no stop."""

    def check_subagent(
        self, outcome: Outcome, model: Any, delegation: Block, child: list[str]
    ) -> None:
        """After the subagent scenario (`delegation`: the parent's delegating call;
        `child`: the ids of the subagent's calls)."""

    # -- shared -----------------------------------------------------------------------
    def probe(self, side: Path, count: int = 10) -> list[Block]:
        """The original plugin's probe: the same command, its annotations rewritten on
        every call (ignoreArgs drops them); each real run leaves a line in `side`."""
        return [
            self.shell(f"echo cbprobe4 >> {side}", f"Probe step {i}") for i in range(1, count + 1)
        ]

    def duplicate(self) -> str:
        """The breaker's refusal of the 6th identical shell call (defaults): copies 6, limit 6."""
        return render(DEFAULT_MESSAGES["duplicate"], self.shell_tool, "duplicate", 6, 6)

    def stop_text(self) -> str:
        """The breaker's stop reason at the third refusal in a row (defaults)."""
        return render(DEFAULT_MESSAGES["stop"], self.shell_tool, "duplicate", 3, 3)

    @property
    def cli(self) -> Path:
        return self.cli_dir() / self.executable

    @classmethod
    def cli_dir(cls) -> Path:
        """Where its CLI is installed for the tests: its Python venv's bin where its pins
        are in tests/e2e/python/, else npm's."""
        if (AGENT_PINS / f"{cls.name}.txt").exists():
            return AGENT_VENVS / f"agent-{cls.name}" / "bin"
        return E2E_BIN

    @classmethod
    def stops(cls) -> bool:
        """Whether its hook can end the agent: its captured events say so (stop.json)."""
        return (EVENTS / cls.name / "stop.json").exists()

    @property
    def incidents(self) -> Path:
        return Path(self.env["XDG_STATE_HOME"]) / "dsh-circuit-breaker" / "incidents.jsonl"

    def incident_lines(self) -> list[dict[str, Any]]:
        """The incident lines, each checked to name this harness (the live page shows it),
        without that field."""
        lines = json_lines(self.incidents)
        for line in lines:
            assert line.pop("harness", None) == self.name, line
        return lines

    def configure(self, config: dict[str, Any]) -> None:
        """The breaker's config, in the user config file the hook reads by default."""
        path = Path(self.env["XDG_CONFIG_HOME"]) / "dsh-circuit-breaker" / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config))

    def model(self, turns: list[Any], **options: Any) -> Any:
        return self.fake(turns, **options)

    def install(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.installed.run("install", self.name, *args, env=self.env, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        self.install_args = args
        self.installed_out = done.stdout  # what it said it installed (`results: ...`)
        return done

    def check_hook_command(self, settings: Path) -> None:
        assert str(self.installed.python) in settings.read_text(), settings.read_text()

    def run(self, model: Any, prompt: str, *more: str) -> Outcome:
        done = run_group(
            self.argv(model, prompt, *more),
            env=self.run_env(model),
            cwd=self.work,
            timeout=self.timeout,
        )
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
        assert model.errors == []
        self.last_stderr = done.stderr
        return self.read(done, model)

    @contextlib.contextmanager
    def trapped(self, allowed: tuple[bytes, ...] = ()) -> Iterator[None]:
        """`self.trap` for the run within (its `proxy_env` in `run_env`): a request that
        tries to leave loopback fails the run, but those starting with one of `allowed`."""
        self.trap = Trap()
        try:
            yield
        finally:
            self.trap.close()
        left = [hit for hit in self.trap.hits if not hit.startswith(allowed)]
        assert left == [], f"a request tried to leave loopback: {left}"


def run_group(
    command: list[str], timeout: float = 240, **options: Any
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` in a process group of its own, all of it killed on a timeout: a
    CLI that relaunches itself as a child process (Gemini CLI) outlives its parent."""
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


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects printed one per line."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def user_texts(body: dict[str, Any]) -> list[str]:
    """The text of each user message of an Anthropic or Chat Completions request."""
    found = []
    for message in body.get("messages") or []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            found.append("\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict)))
        else:
            found.append(str(content))
    return found


def first_user_text(body: dict[str, Any]) -> str:
    return next(iter(user_texts(body)), "")


def subagent_key(session: str | None, agent: str) -> bool:
    """A subagent's key: its parent's session id, then its own agent id."""
    return session is not None and agent.startswith(session + "/") and len(agent) > len(session) + 1


# -- Claude Code ---------------------------------------------------------------------------


def claude_stops(transcript: Path) -> list[dict[str, Any]]:
    """The `hook_stopped_continuation` attachments Claude Code wrote into a transcript."""
    found = []
    for entry in json_lines(transcript):
        attachment = entry.get("attachment") or {}
        if entry.get("type") == "attachment" and attachment.get("type") == (
            "hook_stopped_continuation"
        ):
            found.append(attachment)
    return found


class ClaudeCode(Harness):
    name = "claude-code"
    executable = "claude"
    fake = FakeAnthropic
    shell_tool = "Bash"
    refusal_prefix = "PreToolUse:Bash hook error: "
    flags_errors = True
    env_prefixes = ("ANTHROPIC_", "CLAUDE_", "CLAUDECODE")
    subagent = Subagent(
        delegate=lambda prompt: tool_call(
            "Agent",
            {
                "description": "loop task",
                "prompt": prompt,
                "subagent_type": "general-purpose",
                "run_in_background": False,
            },
        ),
        is_child=lambda body: "SUBAGENT-TASK" in first_user_text(body),
        own_key=lambda agent, outcome: subagent_key(outcome.session, agent),
    )

    def setup(self) -> None:
        self.settings = self.home / "claude-settings.json"
        done = self.install("--settings", str(self.settings))
        assert "installed in" in done.stdout, done.stdout
        (entry,) = json.loads(self.settings.read_text())["hooks"]["PreToolUse"]
        (handler,) = entry["hooks"]
        assert shlex.split(handler["command"])[0] == str(self.installed.python), handler

    def run_env(self, model: Any) -> dict[str, str]:
        return dict(
            self.env,
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="sk-ant-fake-key-for-tests",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
            DISABLE_AUTOUPDATER="1",
        )

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        output = ["--output-format", "stream-json", "--verbose"]
        tools = ["--allowedTools", "Bash Edit Read Agent"]
        return [
            str(self.cli),
            "-p",
            prompt,
            *output,
            *tools,
            "--settings",
            str(self.settings),
            *more,
        ]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        events = json_objects(done.stdout)
        result = events[-1]
        assert result["type"] == "result" and result["is_error"] is False, result
        return Outcome(
            done.stdout, done.stderr, result, events, result["session_id"], result["result"]
        )

    def read_call(self, path: Path) -> Block:
        return tool_call("Read", {"file_path": str(path)})

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        edit = {"file_path": str(path), "old_string": old, "new_string": new}
        return tool_call("Edit", edit)

    def resume(self, outcome: Outcome) -> list[str]:
        return ["--continue"]

    def transcripts(self) -> list[Path]:
        return sorted((self.home / ".claude" / "projects").rglob("*.jsonl"))

    def stop_shown(self, outcome: Outcome) -> list[str]:
        return [stop["message"] for path in self.transcripts() for stop in claude_stops(path)]

    def check_stopped(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        # Not an error; `terminal_reason` names the hook's stop; the stop reason itself is
        # not in the result (nor anywhere on stdout).
        result = outcome.result
        assert (result["subtype"], result["terminal_reason"], result["result"]) == (
            "success",
            "hook_stopped",
            "",
        )
        assert not any("being stopped" in json.dumps(event) for event in outcome.events)
        denied = {d["tool_use_id"] for d in result["permission_denials"]}
        assert denied == {c["id"] for c in calls[5:]}  # the stopping call was refused too
        # The transcript holds the refusals, and the stop as the note on the stopping call.
        (transcript,) = self.transcripts()
        assert transcript.read_text().count("Circuit breaker: NOT run, a repeat") >= 3
        (stop,) = claude_stops(transcript)
        assert (stop["hookName"], stop["toolUseID"]) == ("PreToolUse:Bash", calls[7]["id"])

    def ended_by_stop(self, outcome: Outcome) -> bool | None:
        return bool(outcome.result["terminal_reason"] == "hook_stopped")

    def check_went_on(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        assert self.stop_shown(outcome) == []

    def check_subagent(
        self, outcome: Outcome, model: Any, delegation: Block, child: list[str]
    ) -> None:
        stops = [stop for path in self.transcripts() for stop in claude_stops(path)]
        assert [stop["toolUseID"] for stop in stops] == [child[7]]
        # The parent's next request, at once, carried the Agent result: a subagent that
        # ended with no report.
        requests = model.model_requests
        results = model.results_of
        carrying = [
            i
            for i, body in enumerate(requests)
            if delegation["id"] in {r.call_id for r in results(body)}
        ]
        last_child = max(i for i, body in enumerate(requests) if self.subagent.is_child(body))
        assert carrying and carrying[0] == last_child + 1
        (handed_back,) = [r for r in model.tool_results() if r.call_id == delegation["id"]]
        assert not handed_back.is_error
        assert "(Subagent completed but returned no output.)" in handed_back.text


# -- Codex ---------------------------------------------------------------------------------

CODEX_CONFIG = """model = "fake-model"
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{url}"
wire_api = "responses"
env_key = "FAKE_MODEL_KEY"

[features]
plugins = false
remote_plugin = false
apps = false
in_app_updates = false
api_key_model_discovery = false

[analytics]
enabled = false
"""


class Codex(Harness):
    """`codex exec` with a custom model provider on 127.0.0.1, and the features that
    would reach the network (plugin sync, apps, analytics, updates, model discovery) off."""

    name = "codex"
    executable = "codex"
    fake = FakeOpenAI
    shell_tool = "Bash"  # what its PreToolUse names exec_command
    refusal_prefix = "Command blocked by PreToolUse hook: "
    env_prefixes = ("OPENAI_", "CODEX_")
    not_in: ClassVar[dict[str, str]] = {
        "subagent": "codex exec has no subagent tool to script",
        "edit_cycle": "Codex edits through apply_patch, a freeform tool the fake does not speak",
        "new_prompt": "codex exec resume is not scripted yet",
    }
    trust = True  # what approving the hooks in Codex's /hooks records; a test has no TUI

    def setup(self) -> None:
        self.codex_home = self.home / ".codex"
        self.codex_home.mkdir()
        self.env.update(CODEX_HOME=str(self.codex_home), FAKE_MODEL_KEY="sk-fake-key-for-tests")
        self.hooks_file = self.codex_home / "hooks.json"
        assert str(self.hooks_file) in self.install().stdout
        (entry,) = json.loads(self.hooks_file.read_text())["hooks"]["PreToolUse"]
        (handler,) = entry["hooks"]
        assert shlex.split(handler["command"])[0] == str(self.installed.python), handler
        self.state = Path(self.env["XDG_STATE_HOME"]) / "dsh-circuit-breaker" / "state.db"

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        (self.codex_home / "config.toml").write_text(CODEX_CONFIG.format(url=model.url))
        flags = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        if self.trust:
            flags.append("--dangerously-bypass-hook-trust")
        return [str(self.cli), "exec", *flags, *more, prompt]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        session = re.search(r"session id: (\S+)", done.stderr)
        assert session is not None, done.stderr[-3000:]
        return Outcome(
            done.stdout, done.stderr, session=session.group(1), final=done.stdout.strip()
        )

    def shell(self, command: str, label: str) -> Block:
        return tool_call("exec_command", {"cmd": command})  # no annotation reaches the hook

    def check_went_on(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        assert "hook: PreToolUse Failed" not in outcome.stderr  # every answer taken as valid


# -- GitHub Copilot CLI --------------------------------------------------------------------


def copilot_child(outcome: Outcome) -> str:
    """The key of the one subagent of a Copilot run: the session, then its agentId."""
    (started,) = [e for e in outcome.events if e["type"] == "subagent.started"]
    return f"{outcome.session}/{started['agentId']}"


class Copilot(Harness):
    """`copilot -p` on its own model provider (BYOK: `COPILOT_PROVIDER_BASE_URL`) with
    `COPILOT_OFFLINE=true`: no GitHub login, telemetry, web tools or update checks."""

    name = "copilot"
    executable = "copilot"
    fake = FakeOpenAI
    shell_tool = "bash"
    refusal_prefix = "Denied by preToolUse hook: "
    whole_refusal = True
    env_prefixes = ("COPILOT_", "GITHUB_", "GH_", "OPENAI_")
    not_in: ClassVar[dict[str, str]] = {}
    subagent = Subagent(
        delegate=lambda prompt: tool_call(
            "task",
            {
                "name": "looper",
                "description": "run the loop",
                "prompt": prompt,
                "agent_type": "general-purpose",
                "mode": "sync",
            },
        ),
        is_child=lambda body: any("SUBAGENT-TASK" in text for text in user_texts(body)),
        own_key=lambda agent, outcome: agent == copilot_child(outcome),
    )

    def setup(self) -> None:
        # Where the copilot binary unpacks its JavaScript (about 240 MB): once per session.
        self.env.update(
            COPILOT_PKG_CACHE_HOME=str(self.cache / "copilot-pkg"), COPILOT_OFFLINE="true"
        )
        self.hooks_file = self.home / ".copilot" / "hooks" / "dsh-circuit-breaker.json"
        assert str(self.hooks_file) in self.install().stdout
        self.check_hook_command(self.hooks_file)

    def run_env(self, model: Any) -> dict[str, str]:
        return dict(
            self.env,
            COPILOT_PROVIDER_BASE_URL=model.url,
            COPILOT_PROVIDER_API_KEY="sk-fake-key-for-tests",
            COPILOT_MODEL="fake-model",
        )

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        flags = ["--allow-all-tools", "--output-format", "json", "--no-auto-update"]
        return [str(self.cli), "-p", prompt, *flags, *more]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        events = json_objects(done.stdout)
        assert events and events[-1]["type"] == "result", done.stdout[-2000:]
        messages = [e for e in events if e["type"] == "assistant.message"]
        final = str(messages[-1]["data"]["content"]) if messages else None
        return Outcome(done.stdout, done.stderr, events[-1], events, events[-1]["sessionId"], final)

    def read_call(self, path: Path) -> Block:
        return tool_call("view", {"path": str(path)})

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        return tool_call("edit", {"path": str(path), "old_str": old, "new_str": new})

    def resume(self, outcome: Outcome) -> list[str]:
        return [f"--resume={outcome.session}"]


# -- Factory droid -------------------------------------------------------------------------

DROID_MODEL = {
    "model": "fake-model",
    "displayName": "Fake",
    "apiKey": "sk-fake-key-for-tests",
    "provider": "generic-chat-completion-api",
    "maxOutputTokens": 4096,
}
RISK = ["low", "medium", "low", "high", "low", "medium", "low", "low", "medium", "high"]


class Droid(Harness):
    """`droid exec` with a custom model (`generic-chat-completion-api`) on the fake, no
    Factory login. Left alone it still resolves api.factory.ai, telemetry.factory.ai and an
    OpenTelemetry collector; FACTORY_AIRGAP_ENABLED turns all of that off (checked with
    strace: no connection but the fake's), and auto-update and OpenTelemetry are off too."""

    name = "droid"
    executable = "droid"
    fake = FakeOpenAI
    shell_tool = "Execute"
    refusal_prefix = "Error: "
    whole_refusal = True
    env_prefixes = ("OPENAI_", "FACTORY_")
    timeout = 300
    not_in: ClassVar[dict[str, str]] = {
        "new_prompt": "droid exec sends no UserPromptSubmit, and has no session to resume",
    }
    subagent = Subagent(
        delegate=lambda prompt: tool_call(
            "Task",
            {
                "subagent_type": "worker",
                "description": "loop task",
                "prompt": prompt,
                "await": True,
            },
        ),
        is_child=lambda body: "PARENT-TASK" not in "\n".join(user_texts(body)),
        own_key=lambda agent, outcome: agent != outcome.session,  # the child's own session
    )

    def setup(self) -> None:
        self.env.update(
            FACTORY_AIRGAP_ENABLED="1",
            FACTORY_DROID_AUTO_UPDATE_ENABLED="false",
            FACTORY_OTEL_ENABLED="false",
        )
        # The custom model the user configured; each run points it at its fake.
        self.settings = self.home / ".factory" / "settings.json"
        self.settings.parent.mkdir()
        mine = dict(DROID_MODEL, baseUrl="http://127.0.0.1:9/v1")
        self.settings.write_text(json.dumps({"customModels": [mine]}))
        assert f"installed in {self.settings}" in self.install().stdout
        self.check_hook_command(self.settings)
        assert json.loads(self.settings.read_text())["customModels"] == [mine]  # kept

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        settings = json.loads(self.settings.read_text())
        settings["customModels"] = [dict(DROID_MODEL, baseUrl=model.url)]
        self.settings.write_text(json.dumps(settings))
        command = [str(self.cli), "exec", "--auto", "high", "-m", "custom:Fake-0", "-o", "json"]
        return [*command, *more, prompt]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        assert set(model.paths) == {"/v1/chat/completions"}
        assert done.stderr == ""
        result: dict[str, Any] = json.loads(done.stdout)
        assert result["type"] == "result" and result["is_error"] is False, result
        return Outcome(done.stdout, done.stderr, result, [], result["session_id"], result["result"])

    def shell(self, command: str, label: str) -> Block:
        """An Execute call: the summary and the risk annotations are new on every call."""
        take = sum(map(ord, label))
        arguments = {
            "command": command,
            "summary": label,
            "riskLevel": RISK[take % len(RISK)],
            "riskLevelReason": f"Only appends a fixed marker to a scratch file ({label}).",
        }
        return tool_call("Execute", arguments)

    def read_call(self, path: Path) -> Block:
        return tool_call("Read", {"file_path": str(path)})

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        return tool_call("Edit", {"file_path": str(path), "old_str": old, "new_str": new})

    def hook_outputs(self, session: str = "*") -> dict[str, Any]:
        """What our PreToolUse hook printed for each call of a session (by call id, an
        allowed call's empty output left out), from droid's own session transcript (of
        every session: `*`)."""
        paths = list((self.home / ".factory" / "sessions").glob(f"*/{session}.jsonl"))
        assert paths, session
        found = {}
        for entry in (e for path in paths for e in json_lines(path)):
            message = entry.get("message") or {}
            if message.get("hookEventName") == "PreToolUse":
                (out,) = [r["stdout"] for r in message["hookResults"]]
                if out:
                    found[message["hookToolCallId"]] = json.loads(out)
        return found

    def stop_shown(self, outcome: Outcome) -> list[str]:
        return [
            out["stopReason"]
            for out in self.hook_outputs().values()
            if out.get("continue") is False
        ]

    def check_stopped(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        # `droid exec` ends as if the model had finished: exit 0, no text, no stderr.
        result = outcome.result
        assert (result["subtype"], result["result"], result["num_turns"]) == ("success", "", 8)
        assert outcome.session is not None
        stopping = self.hook_outputs(outcome.session)[calls[7]["id"]]
        assert stopping["continue"] is False
        assert stopping["hookSpecificOutput"]["permissionDecision"] == "deny"

    def check_went_on(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        texts = [model.result_in_next_request(c["id"]).text for c in calls[:5]]
        assert [t.endswith("\n[Process exited with code 0]") for t in texts] == [True] * 5

    def check_subagent(
        self, outcome: Outcome, model: Any, delegation: Block, child: list[str]
    ) -> None:
        # The parent's next request came, with the Task's result: a child with no output.
        (task,) = [r.text for r in model.tool_results() if r.call_id == delegation["id"]]
        assert "The subagent session completed but did not return any output." in task
        (child,) = {i["agent"] for i in self.incident_lines()}
        assert f"{child}.jsonl" in task


# -- Gemini CLI ----------------------------------------------------------------------------

GEMINI_MODEL = "gemini-2.5-flash"  # named, so the CLI does not first ask a router model
GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
# The paths the fake answers: model turns, token counts and the model list.
GEMINI_PATHS = (":streamGenerateContent", ":generateContent", ":countTokens", "/v1beta/models")
PROXY_VARS = {"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY"}
# How Gemini CLI passes a stop on: the stopping call's error, and `gemini -p`'s last line.
GEMINI_STOPPED = "Agent execution stopped by hook: "


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

    def proxy_env(self) -> dict[str, str]:
        """A run's proxy settings: everything but loopback through the trap."""
        return {"HTTPS_PROXY": self.url, "HTTP_PROXY": self.url, "NO_PROXY": "127.0.0.1"}

    def close(self) -> None:
        self._open = False
        self._thread.join(timeout=5)
        self._socket.close()


def gemini_tools(body: dict[str, Any]) -> set[str]:
    tools = body.get("tools") or []
    return {d["name"] for t in tools for d in t.get("functionDeclarations") or []}


class GeminiCli(Harness):
    """`gemini -p` with an API key and GOOGLE_GEMINI_BASE_URL for the model, usage
    statistics, telemetry and update checks off, and HTTPS_PROXY/HTTP_PROXY at a loopback
    listener that fails the run if anything tries to reach another host."""

    name = "gemini-cli"
    executable = "gemini"
    fake = FakeGemini
    shell_tool = "run_shell_command"
    refusal_prefix = "Tool execution blocked: "
    flags_errors = True
    env_prefixes = ("GEMINI_", "GOOGLE_", *PROXY_VARS, *(v.lower() for v in PROXY_VARS))
    stop_flags = ("-o", "text")  # as a person at a terminal runs it
    not_in: ClassVar[dict[str, str]] = {
        "subagent": "a subagent's events carry its parent's session and nothing naming it: "
        "tests/test_command_hook_quirks.py pins that down",
    }

    def setup(self) -> None:
        # Gemini CLI strips a hook's environment to a short list under GitHub Actions
        # (GITHUB_SHA set) or with security.environmentVariableRedaction on; HOME stays.
        # With the XDG directories at their defaults under HOME, the hook finds the same
        # config and state either way.
        self.env.update(
            XDG_STATE_HOME=str(self.home / ".local" / "state"),
            XDG_CONFIG_HOME=str(self.home / ".config"),
        )
        self.settings = self.home / ".gemini" / "settings.json"
        self.settings.parent.mkdir()
        self.settings.write_text(json.dumps(GEMINI_SETTINGS, indent=2))
        assert f"installed in {self.settings}" in self.install().stdout
        written = json.loads(self.settings.read_text())
        assert {k: written[k] for k in GEMINI_SETTINGS} == GEMINI_SETTINGS  # the rest kept
        self.check_hook_command(self.settings)

    def run(self, model: Any, prompt: str, *more: str) -> Outcome:
        with self.trapped():
            return super().run(model, prompt, *more)

    def run_env(self, model: Any) -> dict[str, str]:
        return dict(
            self.env,
            GEMINI_API_KEY="fake-gemini-key-for-tests",
            GOOGLE_GEMINI_BASE_URL=model.url,
            GEMINI_CLI_TRUST_WORKSPACE="true",  # what trusting the folder records
            **self.trap.proxy_env(),
        )

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        output = [] if "-o" in more else ["-o", "json"]
        return [str(self.cli), "-p", prompt, "--yolo", *output, "-m", GEMINI_MODEL, *more]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        assert model.paths and all(p.endswith(GEMINI_PATHS) for p in model.paths), model.paths
        if not done.stdout.lstrip().startswith("{"):  # text output
            return Outcome(done.stdout, done.stderr)
        result: dict[str, Any] = json.loads(done.stdout)
        return Outcome(
            done.stdout, done.stderr, result, [], result["session_id"], result["response"]
        )

    def read_call(self, path: Path) -> Block:
        return tool_call("read_file", {"file_path": str(path)})

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        edit = {
            "file_path": str(path),
            "instruction": f"Replace {old!r} with {new!r} (an attempt at fixing the test).",
            "old_string": old,
            "new_string": new,
        }
        return tool_call("replace", edit)

    def resume(self, outcome: Outcome) -> list[str]:
        return ["--resume", "latest"]

    def stop_shown(self, outcome: Outcome) -> list[str]:
        """The tool error line on stderr (the stopping call's result)."""
        prefix = f"Error executing tool run_shell_command: {GEMINI_STOPPED}"
        return [
            line[len(prefix) :] for line in outcome.stderr.splitlines() if line.startswith(prefix)
        ]

    def check_stopped(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        assert outcome.stdout.strip() == ""  # the model wrote no text
        (stop,) = self.stop_shown(outcome)
        assert outcome.stderr.splitlines()[-1] == f"Agent execution stopped: {GEMINI_STOPPED}{stop}"

    def check_went_on(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        for call in calls[5:]:  # the breaker's text, as the error of that functionResponse
            refused = model.result_in_next_request(call["id"])
            assert refused.raw["response"] == {"error": refused.text}
        assert GEMINI_STOPPED not in outcome.stderr


# -- Qwen Code -----------------------------------------------------------------------------

# What a user might already have in ~/.qwen/settings.json; the install keeps it. It also
# keeps Qwen from reaching anything but the fake model.
QWEN_SETTINGS = {
    "general": {"enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


class QwenCode(Harness):
    """`qwen -p` on the fake (`--auth-type openai`, OPENAI_BASE_URL)."""

    name = "qwen-code"
    executable = "qwen"
    fake = FakeOpenAI
    shell_tool = "run_shell_command"
    whole_refusal = True  # the breaker's text is the whole tool result
    env_prefixes = ("OPENAI_", "QWEN_")
    timeout = 300
    not_in: ClassVar[dict[str, str]] = {
        "results": "under load Qwen Code's shell tool sometimes gives the model `Output: "
        "(empty)` for a command that printed (CI: one copy of seven), a result that moved, so "
        "the frozen poll rightly runs a copy further (docs/qwen-code.md, Known limits)",
        "same_results": "the same: an empty output among the copies restarts their count",
        "moving_results": "the same race: an `Output: (empty)` among a moving poll's results "
        "fails its check of each output (a CI run, 2026-12-06)",
    }
    subagent = Subagent(
        delegate=lambda prompt: tool_call(
            "agent",
            {
                "description": "loop task",
                "prompt": prompt,
                "subagent_type": "general-purpose",
                "run_in_background": False,
            },
        ),
        is_child=lambda body: "SUBAGENT-TASK" in first_user_text(body),
        own_key=lambda agent, outcome: subagent_key(outcome.session, agent),  # plus agent_id
    )

    def setup(self) -> None:
        self.settings = self.home / ".qwen" / "settings.json"
        self.settings.parent.mkdir()
        self.settings.write_text(json.dumps(QWEN_SETTINGS))
        assert f"installed in {self.settings}" in self.install().stdout
        self.check_hook_command(self.settings)

    def run_env(self, model: Any) -> dict[str, str]:
        return dict(
            self.env,
            OPENAI_BASE_URL=model.url,
            OPENAI_API_KEY="sk-fake-key-for-tests",
            OPENAI_MODEL="fake-model",
            QWEN_CODE_DISABLE_PRECONNECT="1",
            QWEN_CODE_SUPPRESS_YOLO_WARNING="1",
        )

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        return [str(self.cli), "--auth-type", "openai", "-p", prompt, "--yolo", "-o", "json", *more]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        assert model.paths and set(model.paths) == {"/v1/chat/completions"}
        result: dict[str, Any] = json.loads(done.stdout)[-1]
        assert result["type"] == "result" and result["is_error"] is False, result
        return Outcome(done.stdout, done.stderr, result, [], result["session_id"], result["result"])

    def read_call(self, path: Path) -> Block:
        return tool_call("read_file", {"file_path": str(path)})

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        edit = {"file_path": str(path), "old_string": old, "new_string": new}
        return tool_call("edit", edit)

    def resume(self, outcome: Outcome) -> list[str]:
        assert outcome.session is not None
        return ["--resume", outcome.session]

    def check_denials(self, outcome: Outcome, refused: list[str]) -> None:
        # Qwen counts our denials as permission denials.
        assert [d["tool_use_id"] for d in outcome.result["permission_denials"]] == refused

    def check_went_on(self, outcome: Outcome, model: Any, calls: list[Block]) -> None:
        for call in calls[:5]:  # an allowed call's result is Qwen's own
            text = model.result_in_next_request(call["id"]).text
            assert text.startswith("Command: echo cbprobe4"), text


# -- Kimi CLI ------------------------------------------------------------------------------

# What a user has in ~/.kimi/config.toml before installing (a comment, a model, their own
# hook), which install keeps; OPENAI_BASE_URL points the provider at each run's fake.
KIMI_CONFIG = """# my Kimi setup
default_model = "fake"
telemetry = false

[providers.fake]
type = "openai_legacy"
base_url = "http://127.0.0.1:9/v1"
api_key = "sk-fake-key-for-tests"

[models.fake]
provider = "fake"
model = "fake-model"
max_context_size = 128000

[[hooks]]
event = "Stop"
command = "true"
"""


class KimiCli(Harness):
    """`kimi --print` (yolo: every call approved) on an `openai_legacy` provider, its base
    URL from OPENAI_BASE_URL; telemetry and update checks off, and HTTPS_PROXY/HTTP_PROXY
    at a loopback listener that fails the run if anything tries to reach another host."""

    name = "kimi-cli"
    executable = "kimi"
    fake = FakeOpenAI
    shell_tool = "Shell"
    refusal_prefix = "<system>ERROR: "
    env_prefixes = ("OPENAI_", "KIMI_", *PROXY_VARS, *(v.lower() for v in PROXY_VARS))
    not_in: ClassVar[dict[str, str]] = {
        "subagent": "a subagent runs in its parent's session and its events name nothing "
        "else: tests/test_command_hook_quirks.py pins that down",
        "moving_results": "Kimi fires PostToolUse without waiting for it, so a result can "
        "come after the next copy's PreToolUse; the rules then judge both copies as if "
        "their results never came (SPEC's parallel calls), and a moving poll may be refused "
        "at its 6th copy (docs/kimi-cli.md, Known limits)",
        "same_results": "for the same reason sameResultLimit may not count a copy whose result "
        "came after the next copy: an interleaved frozen poller then runs on past its 7th "
        "copy (seen in CI under load: 8 ran); the plain frozen poll is refused at its 6th",
    }

    def setup(self) -> None:
        share = self.home / ".kimi"
        share.mkdir()
        self.env.update(KIMI_SHARE_DIR=str(share))
        self.settings = share / "config.toml"
        self.settings.write_text(KIMI_CONFIG)
        assert f"installed in {self.settings}" in self.install().stdout
        self.check_hook_command(self.settings)
        assert self.settings.read_text().startswith(KIMI_CONFIG)  # every line kept

    def run(self, model: Any, prompt: str, *more: str) -> Outcome:
        with self.trapped():
            return super().run(model, prompt, *more)

    def run_env(self, model: Any) -> dict[str, str]:
        return dict(
            self.env,
            OPENAI_BASE_URL=model.url,
            OPENAI_API_KEY="sk-fake-key-for-tests",
            KIMI_DISABLE_TELEMETRY="1",
            KIMI_CLI_NO_AUTO_UPDATE="1",
            **self.trap.proxy_env(),
        )

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        return [str(self.cli), "--print", "--output-format", "stream-json", "-p", prompt, *more]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        assert model.paths and set(model.paths) == {"/v1/chat/completions"}, model.paths
        events = json_objects(done.stdout)
        said = [e["content"] for e in events if e.get("role") == "assistant"]
        final = said[-1] if said and isinstance(said[-1], str) else None
        session = re.search(r"kimi -r (\S+)", done.stderr)
        assert session is not None, done.stderr[-3000:]
        return Outcome(done.stdout, done.stderr, {}, events, session.group(1), final)

    def read_call(self, path: Path) -> Block:
        return tool_call("ReadFile", {"path": str(path)})

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        return tool_call("StrReplaceFile", {"path": str(path), "edit": {"old": old, "new": new}})

    def resume(self, outcome: Outcome) -> list[str]:
        assert outcome.session is not None
        return ["-r", outcome.session]


# A user's own Vibe setup (a generic OpenAI-compatible provider on loopback, telemetry and
# update checks off) and a hook of theirs in hooks.toml, which install keeps; each run points
# the provider's api_base at its fake.
VIBE_CONFIG = """active_model = "fake"
enable_telemetry = false
enable_update_checks = false

[[providers]]
name = "fake"
api_base = "http://127.0.0.1:9/v1"
api_key_env_var = "FAKE_VIBE_API_KEY"
backend = "generic"

[[models]]
name = "fake-model"
provider = "fake"
alias = "fake"
"""
VIBE_HOOKS = """# my hooks
[[hooks]]
name = "done"
type = "post_agent"
command = "true"
"""


class MistralVibe(Harness):
    """`vibe -p --auto-approve --output json` on a `generic` provider whose api_base is the
    fake's; HTTPS_PROXY/HTTP_PROXY at a loopback listener that fails the run if anything
    tries to reach another host. The model calls `bash`; the hook sees `file_system.bash`."""

    name = "mistral-vibe"
    executable = "vibe"
    fake = FakeOpenAI
    shell_tool = "file_system.bash"
    whole_refusal = True  # the deny's reason alone is the tool result (3.0.2)
    env_prefixes = ("VIBE_", "MISTRAL_", *PROXY_VARS, *(v.lower() for v in PROXY_VARS))
    not_in: ClassVar[dict[str, str]] = {
        "new_prompt": "Vibe has no prompt event (only post_agent, after a turn): nothing "
        "tells the hook a person typed a new prompt, so the count carries on",
        "subagent": "a Vibe subagent is started from a run_typescript program "
        "(tools.subagent), which the scripted model does not write; its events carry "
        "parent_session_id, keyed apart in harnesses/mistral_vibe.py",
    }

    def setup(self) -> None:
        vibe_home = self.home / ".vibe"
        vibe_home.mkdir()
        self.env.update(VIBE_HOME=str(vibe_home))
        self.config = vibe_home / "config.toml"
        self.config.write_text(VIBE_CONFIG)
        self.settings = vibe_home / "hooks.toml"
        self.settings.write_text(VIBE_HOOKS)
        assert f"installed in {self.settings}" in self.install().stdout
        self.check_hook_command(self.settings)
        assert self.settings.read_text().startswith(VIBE_HOOKS)  # every line kept

    def run(self, model: Any, prompt: str, *more: str) -> Outcome:
        self.config.write_text(VIBE_CONFIG.replace("http://127.0.0.1:9/v1", model.url))
        with self.trapped():
            return super().run(model, prompt, *more)

    def run_env(self, model: Any) -> dict[str, str]:
        return dict(
            self.env,
            FAKE_VIBE_API_KEY="sk-fake-key-for-tests",
            **self.trap.proxy_env(),
        )

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        return [str(self.cli), "-p", prompt, "--auto-approve", "--output", "json", *more]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        assert model.paths and set(model.paths) == {"/v1/chat/completions"}, model.paths
        events = json.loads(done.stdout)
        said = [
            part.get("text")
            for e in events
            if e.get("type") == "message" and e.get("role") == "assistant"
            for part in e.get("content") or []
        ]
        final = said[-1] if said and isinstance(said[-1], str) else None
        sessions = {e.get("sessionId") for e in events} - {None}
        assert len(sessions) == 1, sessions
        return Outcome(done.stdout, done.stderr, {}, events, sessions.pop(), final)

    def shell(self, command: str, label: str) -> Block:
        return tool_call("bash", {"command": command})  # its bash takes no description

    def read_call(self, path: Path) -> Block:
        return tool_call("read_file", {"path": str(path)})

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        return tool_call("edit", {"file_path": str(path), "old_string": old, "new_string": new})

    def resume(self, outcome: Outcome) -> list[str]:
        assert outcome.session is not None
        return ["--resume", outcome.session]


# -- OpenHands CLI ---------------------------------------------------------------------------

# The one request OpenHands CLI 1.16.0 sends off the machine at every start, with no setting
# to turn it off: its splash screen asks PyPI for a newer release (openhands_cli/
# version_check.py). The trap takes it, so it never leaves; any other request fails the run.
OPENHANDS_VERSION_CHECK = b"CONNECT pypi.org:443 "
# A user's own hook, which install keeps.
OPENHANDS_HOOKS = {"hooks": {"Stop": [{"matcher": "*", "hooks": [{"command": "true"}]}]}}


class OpenHandsCli(Harness):
    """`openhands --headless --json --override-with-envs` with LLM_MODEL, LLM_BASE_URL and
    LLM_API_KEY naming the fake (LiteLLM, Chat Completions); LiteLLM's cost map read from the
    package, git allowed only local repositories (the CLI clones OpenHands' public skills at
    every start), HTTPS_PROXY/HTTP_PROXY at a loopback listener that fails the run if anything
    but the CLI's version check tries to reach another host.

    The model writes a sentence before each call, different every time, as models do:
    OpenHands' StuckDetector, on in the CLI with no setting to turn it off, compares that text
    with the call, and ends a run after four identical text-call-result rounds, before the
    breaker's sixth (docs/openhands-cli.md)."""

    name = "openhands-cli"
    executable = "openhands"
    fake = FakeOpenAI
    shell_tool = "terminal"
    refusal_prefix = "Action rejected: "
    whole_refusal = True
    env_prefixes = ("LLM_", "OPENHANDS_", "LITELLM_", *PROXY_VARS, *(v.lower() for v in PROXY_VARS))
    not_in: ClassVar[dict[str, str]] = {
        "subagent": "a subagent (the task tool) runs with its agent definition's hooks only, "
        "never hooks.json's: its calls do not reach the hook (docs/openhands-cli.md, Known "
        "limits)",
    }

    def setup(self) -> None:
        self.settings = self.home / ".openhands" / "hooks.json"
        self.settings.parent.mkdir()
        self.settings.write_text(json.dumps(OPENHANDS_HOOKS))
        assert f"installed in {self.settings}" in self.install().stdout
        self.check_hook_command(self.settings)
        hooks = json.loads(self.settings.read_text())["hooks"]
        assert hooks["Stop"] == OPENHANDS_HOOKS["hooks"]["Stop"]  # the user's hook kept

    def run(self, model: Any, prompt: str, *more: str) -> Outcome:
        with self.offline():
            return super().run(model, prompt, *more)

    @contextlib.contextmanager
    def offline(self) -> Iterator[None]:
        """What `run_env` needs for the CLI run within, headless or in its terminal UI: the
        trap, passing its version check only, and a tmux directory of the run's own (its
        terminal tool runs commands in a tmux server, socket `openhands`, that outlives the
        CLI), ended with it."""
        self.tmux = Path(tempfile.mkdtemp(prefix="oh-tmux-"))
        try:
            with self.trapped(allowed=(OPENHANDS_VERSION_CHECK,)):
                yield
        finally:
            subprocess.run(
                ["tmux", "-L", "openhands", "kill-server"],
                env=dict(self.env, TMUX_TMPDIR=str(self.tmux)),
                capture_output=True,
                timeout=30,
            )
            shutil.rmtree(self.tmux, ignore_errors=True)

    def run_env(self, model: Any) -> dict[str, str]:
        return dict(
            self.env,
            LLM_MODEL="openai/fake-model",
            LLM_BASE_URL=model.url,
            LLM_API_KEY="sk-fake-key-for-tests",
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            OPENHANDS_SUPPRESS_BANNER="1",
            GIT_ALLOW_PROTOCOL="file",
            TMUX_TMPDIR=str(self.tmux),
            **self.trap.proxy_env(),
        )

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        return [str(self.cli), "--headless", "--json", "--override-with-envs", "-t", prompt, *more]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        assert model.paths and set(model.paths) == {"/v1/chat/completions"}, model.paths
        events = json_objects(done.stdout)
        said = [
            part.get("text")
            for e in events
            if e.get("kind") == "MessageEvent" and e.get("source") == "agent"
            for part in e["llm_message"]["content"]
        ]
        session = re.search(r"openhands --resume (\S+)", done.stdout)
        assert session is not None, done.stdout[-3000:]
        final = said[-1] if said else None
        return Outcome(done.stdout, done.stderr, {}, events, session.group(1), final)

    def shell(self, command: str, label: str) -> Any:
        """The call, after a sentence of its own (the label): see the class's docstring.
        OpenHands drops `summary` and `security_risk` before its hook sees the call."""
        call = tool_call(self.shell_tool, {"command": command, "summary": label, **LOW_RISK})
        return [text(f"{label}."), call]

    def read_call(self, path: Path) -> Block:
        return tool_call("file_editor", {"command": "view", "path": str(path), **LOW_RISK})

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        edit = {"command": "str_replace", "path": str(path), "old_str": old, "new_str": new}
        return tool_call("file_editor", {**edit, **LOW_RISK})

    def resume(self, outcome: Outcome) -> list[str]:
        assert outcome.session is not None
        return ["--resume", outcome.session]


# The risk the CLI's security analyzer asks the model to rate every call with.
LOW_RISK = {"security_risk": "LOW"}


# -- Hermes Agent --------------------------------------------------------------------------

# What a user has in $HERMES_HOME/config.yaml before installing (their model, hooks accepted
# without a prompt, their own hook), which install keeps; each run points base_url at its fake.
# Offline: the context length given (else Hermes asks openrouter.ai), tirith off (else it
# fetches its scanner from github.com), no runtime installs (else, at every start, its
# text-to-speech check runs `pip install edge-tts`, which is not among hermes-agent's
# dependencies: six tries at pypi.org), and the update check answered from its cache
# ($HERMES_HOME/.update_check, else it asks pypi.org). No skill review after ten tool
# calls (it would ask the model once more, unscripted).
HERMES_CONFIG = """model:
  provider: custom
  base_url: http://127.0.0.1:9/v1
  api_key: sk-fake-key-for-tests
  default: fake-model
  context_length: 128000
security:
  tirith_enabled: false
  allow_lazy_installs: false
skills:
  creation_nudge_interval: 0
hooks_auto_accept: true
hooks:
  on_session_end:
  - command: /bin/true
"""
HERMES_VERSION = "0.19.0"  # tests/e2e/python/hermes.txt
HERMES_BASE_URL = re.compile(r"http://127\.0\.0\.1:\d+/v1")


class Hermes(Harness):
    """`hermes chat -q PROMPT -Q --yolo --accept-hooks` on a `custom` provider (Chat
    Completions), HTTPS_PROXY/HTTP_PROXY at a loopback listener that fails the run if
    anything tries to reach another host."""

    name = "hermes"
    executable = "hermes"
    fake = FakeOpenAI
    shell_tool = "terminal"
    refusal_prefix = '{"error": "'  # Hermes gives the model the block reason as a JSON error
    env_prefixes = ("OPENAI_", "HERMES_", *PROXY_VARS, *(v.lower() for v in PROXY_VARS))
    not_in: ClassVar[dict[str, str]] = {
        "subagent": "delegate_task from the top-level agent runs its child in the background "
        "(background: false too): the parent goes on at once and `hermes chat -q` ends with "
        "it, cutting the child off after a few calls, so the scenario's waiting parent cannot "
        "be scripted; the child runs under a session id of its own, keyed apart",
    }

    def setup(self) -> None:
        hermes_home = self.home / ".hermes"
        hermes_home.mkdir()
        self.env.update(HERMES_HOME=str(hermes_home))
        self.settings = hermes_home / "config.yaml"
        self.settings.write_text(HERMES_CONFIG)
        checked = {"ts": time.time(), "rev": None, "ver": HERMES_VERSION, "behind": 0}
        (hermes_home / ".update_check").write_text(json.dumps(checked))
        assert f"installed in {self.settings}" in self.install().stdout
        self.check_hook_command(self.settings)
        assert "on_session_end:\n  - command: /bin/true" in self.settings.read_text()

    def point_at(self, model: Any) -> None:
        """The user's config's `model.base_url`, at the fake."""
        text = self.settings.read_text()
        self.settings.write_text(HERMES_BASE_URL.sub(model.url, text, count=1))

    def run(self, model: Any, prompt: str, *more: str) -> Outcome:
        self.point_at(model)
        with self.trapped():
            return super().run(model, prompt, *more)

    def run_env(self, model: Any) -> dict[str, str]:
        return dict(
            self.env,
            **self.trap.proxy_env(),
        )

    def shell(self, command: str, label: str) -> Block:
        return tool_call(self.shell_tool, {"command": command})  # terminal takes no label

    def argv(self, model: Any, prompt: str, *more: str) -> list[str]:
        return [str(self.cli), "chat", "-q", prompt, "-Q", "--yolo", "--accept-hooks", *more]

    def read(self, done: subprocess.CompletedProcess[str], model: Any) -> Outcome:
        assert "/v1/chat/completions" in model.paths, model.paths
        # -Q: the final text on stdout (after its own warnings), the session on stderr.
        found = re.search(r"^session_id: (\S+)\s*$", done.stderr, re.MULTILINE)
        assert found is not None, done.stdout[-3000:] + done.stderr[-3000:]
        said = [
            line.strip()
            for line in done.stdout.splitlines()
            if line.strip() and not line.lstrip().startswith("\u26a0")
        ]
        final = said[-1] if said else None
        return Outcome(done.stdout, done.stderr, {}, [], found.group(1), final)

    def read_call(self, path: Path) -> Block:
        return tool_call("read_file", {"path": str(path)})

    def edit_call(self, path: Path, old: str, new: str) -> Block:
        edit = {"mode": "replace", "path": str(path), "old_string": old, "new_string": new}
        return tool_call("patch", edit)

    def resume(self, outcome: Outcome) -> list[str]:
        assert outcome.session is not None
        return ["--resume", outcome.session]


# name -> description: a command-hook harness is one class and one line here.


HARNESSES: dict[str, type[Harness]] = {
    h.name: h
    for h in (
        ClaudeCode,
        Codex,
        Copilot,
        Droid,
        GeminiCli,
        Hermes,
        KimiCli,
        MistralVibe,
        OpenHandsCli,
        QwenCode,
    )
}


def in_scratch_home(name: str, installed: Installed, cache: Path) -> Harness:
    """Harness `name` in the installed product's scratch HOME, our hook installed."""
    from conftest import require

    described = HARNESSES[name]
    where = described.cli_dir() / described.executable
    require(where.exists(), f"the {name} CLI at {where} (scripts/setup)")
    return described(installed, cache)
