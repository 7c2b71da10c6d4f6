"""The real plugin harness CLIs (pi, OpenCode, Kilo Code; pinned in tests/e2e/package.json)
run headless in a scratch HOME against a scripted model speaking OpenAI Chat Completions
on 127.0.0.1 (support/fake_openai.py), with the plugin that OUR `install` wrote: the
installed wheel's console script (support/installed.py), so the adapter, the guard client
and the guard all come from the wheel.

Nothing reaches the network: the harness's own model lists, update checks and telemetry
are off; HTTP(S)_PROXY points at a closed port on 127.0.0.1 (so anything that tries the
network fails at once), and npm's registry too (OpenCode and Kilo install their plugin
types into the config directory at start; without a registry they log that and go on).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from support.fake_openai import FakeOpenAI, function_call
from support.installed import Installed

E2E_BIN = Path(__file__).resolve().parents[1] / "e2e" / "node_modules" / ".bin"
PROVIDER, MODEL = "fake", "fake-model"


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Result:
    """One finished headless run."""

    returncode: int
    stdout: str
    stderr: str
    ready: list[dict[str, Any]]  # the plugin's ready markers, one per guard start
    log: str  # the harness's own log file(s), where it keeps them

    def events(self) -> list[dict[str, Any]]:
        """`run --format json` output (OpenCode, Kilo), one event per line."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]


class Harness:
    """One harness CLI in a scratch HOME: `install()` runs our installer, `run()` runs the
    CLI headless against `model`."""

    name: str  # `install NAME`
    label: str  # as doctor names it
    executable: str
    adapter: str  # js/<adapter>.mjs

    def __init__(self, product: Installed) -> None:
        self.product = product
        self.home = product.home
        self.work = self.home / "work"
        self.work.mkdir(exist_ok=True)
        self.ready_file = self.home / "ready.jsonl"
        self.incidents = self.home / "state" / "dsh-circuit-breaker" / "incidents.jsonl"
        dead = f"http://127.0.0.1:{closed_port()}"
        self.env = product.env
        self.env["PATH"] = f"{E2E_BIN}:{self.env['PATH']}"
        self.env.update(
            HTTP_PROXY=dead,
            HTTPS_PROXY=dead,
            http_proxy=dead,
            https_proxy=dead,
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
            npm_config_registry=dead + "/",
            npm_config_fetch_retries="0",
            DSH_CIRCUIT_BREAKER_READY_FILE=str(self.ready_file),
            PWD=str(self.work),
        )

    @property
    def cli(self) -> Path:
        return E2E_BIN / self.executable

    @property
    def loader(self) -> Path:
        """Where our installer puts the plugin."""
        raise NotImplementedError

    # Kilo sometimes loads its plugins once more as `run` exits (after "disposing instance"),
    # which starts one more guard that is gone at once.
    reloads_at_exit: ClassVar[bool] = False

    def starts(self, result: Result) -> list[dict[str, Any]]:
        """The guard starts of the run itself (its ready markers, in order)."""
        found = list(result.ready)
        if self.reloads_at_exit and len(found) > 1 and found[-1].get("start") == 1:
            found.pop()
        assert all(r.get("ok") for r in result.ready), result.ready
        return found

    def session_id(self, result: Result) -> str:
        """The id the harness ran the (main) session under, from its JSON output."""
        raise NotImplementedError

    def warnings(self, result: Result) -> str:
        """Where the plugin's warnings went."""
        raise NotImplementedError

    # The exit status of a headless run that the breaker stopped.
    stopped_returncode: ClassVar[int]

    def recorded_result(self, result: Result, call_id: str) -> str:
        """The result the harness recorded for call `call_id` (its JSON output), whether or
        not a model was sent it."""
        raise NotImplementedError

    def stop_shown(self, result: Result) -> list[str]:
        """What the headless run told the user about why it ended (stderr lines, error
        events)."""
        raise NotImplementedError

    def write_call(self, path: Path, content: str) -> dict[str, Any]:
        raise NotImplementedError

    def edit_call(self, path: Path, old: str, new: str) -> dict[str, Any]:
        raise NotImplementedError

    def available(self) -> bool:
        return self.cli.exists()

    @property
    def adapter_file(self) -> Path:
        """The adapter inside the installed package."""
        return self.product.package / "js" / f"{self.adapter}.mjs"

    def install(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.product.run("install", self.name, *args, env=self.env)
        assert done.returncode == 0, done.stderr
        return done

    def model(self, turns: list[Any]) -> FakeOpenAI:
        """A scripted model for this harness: its side requests (titles) do not take turns."""
        return FakeOpenAI(turns, side=self.side_request, side_reply="Probe session")

    @staticmethod
    def side_request(body: dict[str, Any]) -> bool:
        return False

    def uninstall(self) -> None:
        done = self.product.run("uninstall", self.name, env=self.env)
        assert done.returncode == 0, done.stderr

    def configure(self, model: FakeOpenAI) -> None:
        raise NotImplementedError

    def argv(self, prompt: str, session: str) -> list[str]:
        """The command line; `session`: "none" (not saved, where the harness allows),
        "new" (saved), or "continue" (the last one)."""
        raise NotImplementedError

    def log_text(self) -> str:
        return ""

    def run(
        self,
        model: FakeOpenAI,
        prompt: str,
        session: str = "none",
        flags: tuple[str, ...] = (),
        timeout: float = 180,
    ) -> Result:
        self.configure(model)
        self.ready_file.unlink(missing_ok=True)
        argv = self.argv(prompt, session)
        proc = subprocess.Popen(
            [*argv[:-1], *flags, argv[-1]],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=30)
            raise AssertionError(
                f"{self.name} did not finish in {timeout} s: {err[-3000:]}"
            ) from None
        ready = [json.loads(line) for line in _lines(self.ready_file)]
        return Result(proc.returncode, out, err, ready, self.log_text())

    def guard_pid(self, start: int) -> int | None:
        """The pid of the guard that start number `start` spawned (from its ready
        marker), or None while there is none."""
        for record in (json.loads(line) for line in _lines(self.ready_file)):
            if record.get("start") == start and record.get("ok"):
                return int(record["pid"])
        return None


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def kill_and_wait(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL a guard and wait until it is dead (a zombie counts: it is its harness's child)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.02)
    raise AssertionError(f"guard {pid} still alive after SIGKILL")


class Pi(Harness):
    name = label = executable = adapter = "pi"

    @property
    def agent_dir(self) -> Path:
        return self.home / ".pi" / "agent"

    @property
    def loader(self) -> Path:
        return self.agent_dir / "extensions" / "dsh-circuit-breaker.js"

    def session_id(self, result: Result) -> str:
        (session,) = [e for e in result.events() if e.get("type") == "session"]
        return str(session["id"])

    def warnings(self, result: Result) -> str:
        return result.stderr  # print mode has no UI: the adapter writes them to stderr

    stopped_returncode = 0  # `--mode json` (`--mode text`: 1)

    def recorded_result(self, result: Result, call_id: str) -> str:
        (end,) = [
            e
            for e in result.events()
            if e.get("type") == "tool_execution_end" and e.get("toolCallId") == call_id
        ]
        return "".join(block["text"] for block in end["result"]["content"])

    def stop_shown(self, result: Result) -> list[str]:
        return result.stderr.splitlines()

    def write_call(self, path: Path, content: str) -> dict[str, Any]:
        return function_call("write", {"path": str(path), "content": content})

    def edit_call(self, path: Path, old: str, new: str) -> dict[str, Any]:
        edits = [{"oldText": old, "newText": new}]
        return function_call("edit", {"path": str(path), "edits": edits})

    def configure(self, model: FakeOpenAI) -> None:
        provider = {
            "baseUrl": model.url,
            "api": "openai-completions",
            "apiKey": "sk-fake-key-for-tests",
            "models": [{"id": MODEL}],
        }
        self.agent_dir.mkdir(parents=True, exist_ok=True)
        (self.agent_dir / "models.json").write_text(json.dumps({"providers": {PROVIDER: provider}}))
        self.env["PI_OFFLINE"] = "1"

    def argv(self, prompt: str, session: str) -> list[str]:
        model = ["--provider", PROVIDER, "--model", MODEL]
        saved = {"none": ["--no-session"], "new": [], "continue": ["--continue"]}[session]
        return [str(self.cli), "-p", "--mode", "json", *model, *saved, prompt]


class OpenCode(Harness):
    name = executable = adapter = "opencode"
    label = "OpenCode"
    app = "opencode"  # its directory names under XDG_CONFIG_HOME and XDG_DATA_HOME
    env_prefix = "OPENCODE"
    config_name = "opencode.json"
    quiet: ClassVar[dict[str, str]] = {}  # more variables that keep it off the network
    # Error events `run` adds after a rejected doom_loop permission.
    doom_loop_epilogue: ClassVar[tuple[str, ...]] = ()

    def __init__(self, product: Installed) -> None:
        super().__init__(product)
        self.extra_config: dict[str, Any] = {}  # more keys for the config file

    @property
    def config_dir(self) -> Path:
        return self.home / "config" / self.app

    @property
    def loader(self) -> Path:
        return self.config_dir / "plugins" / "dsh-circuit-breaker.js"

    def session_id(self, result: Result) -> str:
        found = {e["sessionID"] for e in result.events() if "sessionID" in e}
        assert len(found) == 1, found
        return found.pop()

    def warnings(self, result: Result) -> str:
        return result.stderr  # OpenCode's log (client.app.log), printed by --print-logs

    stopped_returncode = 1  # the session ended in an error
    # The task tool's result when its subagent's session ends in `error`.
    subagent_failed: ClassVar[str] = "Subagent failed (task_id: {task_id}): {error}"

    def recorded_result(self, result: Result, call_id: str) -> str:
        (part,) = [
            e["part"]
            for e in result.events()
            if e.get("type") == "tool_use" and e["part"].get("callID") == call_id
        ]
        state = part["state"]
        return str(state["error"] if state["status"] == "error" else state["output"])

    def exported_result(self, session_id: str, call_id: str) -> str:
        """The result of call `call_id` as session `session_id` keeps it (`export`: `run`
        prints the main session's events only, not a subagent's)."""
        done = subprocess.run(
            [str(self.cli), "export", "--pure", session_id],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        exported = json.loads(done.stdout[done.stdout.index("{") :])
        (state,) = [
            part["state"]
            for message in exported["messages"]
            for part in message["parts"]
            if part.get("type") == "tool" and part.get("callID") == call_id
        ]
        return str(state["error"] if state["status"] == "error" else state["output"])

    def stop_shown(self, result: Result) -> list[str]:
        errors = [e["error"] for e in result.events() if e.get("type") == "error"]
        return [str(error.get("data", {}).get("message")) for error in errors]

    def write_call(self, path: Path, content: str) -> dict[str, Any]:
        return function_call("write", {"filePath": str(path), "content": content})

    def edit_call(self, path: Path, old: str, new: str) -> dict[str, Any]:
        edit = {"filePath": str(path), "oldString": old, "newString": new}
        return function_call("edit", edit)

    def configure(self, model: FakeOpenAI) -> None:
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": model.url, "apiKey": "sk-fake-key-for-tests"},
            "models": {MODEL: {"name": "Fake", "tool_call": True}},
        }
        # Over what is there already (a plugin the harness's own `plugin` command added).
        path = self.config_dir / self.config_name
        config = json.loads(path.read_text()) if path.exists() else {}
        config.update(model=f"{PROVIDER}/{MODEL}", provider={PROVIDER: provider})
        config.update(self.extra_config)
        self.config_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2))
        self.env.update(
            XDG_DATA_HOME=str(self.home / "data"),
            XDG_CACHE_HOME=str(self.home / "cache"),
            **{
                f"{self.env_prefix}_DISABLE_MODELS_FETCH": "1",
                f"{self.env_prefix}_DISABLE_AUTOUPDATE": "1",
                f"{self.env_prefix}_DISABLE_SHARE": "1",
            },
            **self.quiet,
        )

    def argv(self, prompt: str, session: str) -> list[str]:
        # --print-logs: OpenCode's log on stderr, where the adapter's warnings go (its
        # log file did not always have them yet when a short run ended).
        resume = ["--continue"] if session == "continue" else []
        return [str(self.cli), "run", "--print-logs", "--format", "json", *resume, prompt]

    @staticmethod
    def side_request(body: dict[str, Any]) -> bool:
        """The title request OpenCode makes beside the first turn (its `title` agent)."""
        first = next((m for m in body.get("messages") or [] if m.get("role") == "user"), {})
        return "Generate a title for this conversation" in json.dumps(first.get("content"))

    def log_text(self) -> str:
        logs = sorted((self.home / "data" / self.app / "log").glob("*.log"))
        return "".join(p.read_text(errors="replace") for p in logs)


class Kilo(OpenCode):
    name = executable = "kilo"
    label = "Kilo Code"
    app = "kilo"
    env_prefix = "KILO"
    config_name = "kilo.json"
    reloads_at_exit = True
    quiet: ClassVar[dict[str, str]] = {"KILO_TELEMETRY_LEVEL": "off"}  # else PostHog
    doom_loop_epilogue = (
        "run ended with an auto-rejected permission; pass --auto for autonomous use",
    )
    subagent_failed = (
        "{error}\nThis subagent session can be resumed: call the task tool again with "
        'task_id="{task_id}" and a prompt describing how to continue or recover. Its prior '
        "context is preserved."
    )


HARNESSES: dict[str, type[Harness]] = {"pi": Pi, "opencode": OpenCode, "kilo": Kilo}


def in_scratch_home(name: str, installed: Installed) -> Harness:
    """Harness `name` in the installed product's scratch HOME, nothing installed yet."""
    from conftest import require

    found = HARNESSES[name](installed)
    require(found.available(), f"the {name} CLI (tests/e2e: npm ci)")
    return found
