"""Every subcommand, every option, over a table of bad values, run from the installed wheel.

The options are read from the parsers themselves (`cli.COMMANDS`, each module's
`add_arguments`, each TARGET's own parser), so a new option joins the table by being an
option: its metavar (or its type, or its choices) says which bad values it gets, and an
option whose kind the table does not know fails this test until it is given one.

Each run must end on its own (a timeout), with a non-zero exit, no `Traceback` and no
"internal error" on either stream, and one line on stderr that starts with
`dsh-circuit-breaker: ` and names the option or the value. The hook is the exception
its contract makes: it allows the call (exit 0) and says the problem in that one line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsh_circuit_breaker.cli import COMMANDS
from hook_support import pre_tool_use
from support.guard_service import TOKEN, Service
from support.installed import Installed

PREFIX = "dsh-circuit-breaker: "
REPORTED = ("PROBLEM", "FAIL")  # doctor's report lines for a failed check
TRANSCRIPT = Path(__file__).parent / "fixtures" / "transcripts" / "dsh"
WORKERS = 4  # subprocesses at once: most of a run is the interpreter starting
RUN_SECONDS = 30.0  # one run on a loaded 2-core CI machine; a hang fails, not stalls
pytestmark = pytest.mark.timeout(600)


@dataclass
class World:
    """The things bad values point at, made once for the whole table."""

    root: Path
    busy_port: int  # a port something listens on
    guard_port: int  # a guard (from the wheel) with TOKEN listens there

    @property
    def directory(self) -> str:
        return str(self.root / "a-directory")

    @property
    def fifo(self) -> str:
        return str(self.root / "a-fifo")

    @property
    def file(self) -> str:
        return str(self.root / "a-file.json")

    @property
    def missing(self) -> str:
        return str(self.root / "no-such-file.toml")


# A bad value: its name in failure messages, and the argument it passes.
VALUES: dict[str, Callable[[World], str]] = {
    "empty": lambda w: "",
    "blank": lambda w: "  ",
    "zero": lambda w: "0",
    "negative": lambda w: "-1",
    "huge": lambda w: str(10**30),
    "word": lambda w: "many",
    "directory": lambda w: w.directory,
    "fifo": lambda w: w.fifo,
    "missing": lambda w: w.missing,
    "file": lambda w: w.file,
    "missing-parent": lambda w: str(Path(w.missing) / "out.html"),
    "typo-url": lambda w: "sqlit:///x.db",
    "unknown-url-parameter": lambda w: "redis://127.0.0.1:6379/0?retry_afer=1",
    "no-redis": lambda w: "redis://127.0.0.1:1/0",  # the line names it as 127.0.0.1:1
    "port-out-of-range": lambda w: "127.0.0.1:99999",
    "not-a-port": lambda w: "127.0.0.1:http",
    "port-in-use": lambda w: f"127.0.0.1:{w.busy_port}",
    "short-token": lambda w: "x",
    "not-json": lambda w: "{duplicateLimit: 3",
    "json-typo": lambda w: '{"duplicateLimt": 3}',
    "no-equals": lambda w: "duplicateLimit",
    "unknown-key": lambda w: "duplicateLimt=3",
    "not-a-choice": lambda w: "no-such-choice",
    "budget-zero": lambda w: "web_search=0",
}

PATHS = ["empty", "fifo", "missing"]
NUMBERS = ["empty", "zero", "negative", "huge", "word"]
# metavar (or, without one, the option's type name) -> the bad values it gets.
KINDS: dict[str, list[str]] = {
    "FILE": [*PATHS, "directory"],
    "PATH": PATHS,  # a transcript file or a directory of them
    "DIR": [*PATHS, "file"],
    "OUT": ["empty", "directory", "fifo", "missing-parent"],
    "URL": ["empty", "blank", "typo-url", "unknown-url-parameter"],
    "[HOST:]PORT": ["empty", "port-out-of-range", "not-a-port"],
    "TOKEN": ["empty", "short-token"],
    "JSON": ["empty", "not-json", "json-typo"],
    "KEY=VALUE": ["empty", "no-equals", "unknown-key"],
    "N": NUMBERS,
    "SECONDS": NUMBERS,  # the relay's --upstream-timeout
    "N,N": NUMBERS,
    "PATTERN=N,N": ["empty", "no-equals", "budget-zero"],
    "NAME": ["empty", "blank"],
    # An interpreter written into a loader or package, perhaps for another machine (a
    # DSH package); doctor reports one that does not run.
    "PYTHON": ["empty", "blank"],
    "AGENT": ["empty", "blank"],
    "SERVER": ["empty", "blank"],  # the relay's --name
    "ID": ["empty", "blank"],  # the relay's --agent-id
    "COMMAND": ["empty"],  # the MCP server the relay starts
    "choices": ["empty", "not-a-choice"],
}
# Values that are fine for one option though bad for its kind: a settings file that does
# not exist yet is created by install (and not found by uninstall: nothing to do).
ACCEPTED = {
    ("install", "--settings", "missing"),
    ("install", "--hooks-file", "missing"),
    ("install", "--config-file", "missing"),  # Kimi CLI's and Hermes Agent's settings file
    ("uninstall", "--settings", "missing"),
    ("uninstall", "--hooks-file", "missing"),
    ("uninstall", "--config-file", "missing"),
    ("dsh-package", "--out", "missing"),  # the package directory is created
    ("uninstall", "--dsh-home", "missing"),  # no DSH home: nothing installed, nothing to do
}
# The rows the issue names that only some commands can meet: a store that does not
# answer (commands that open it), a port in use and a wrong token (the HTTP guard).
EXTRA: list[tuple[tuple[str, ...], str, str]] = [
    *((("status",), "--state", "no-redis"),),
    *((("reset", "someone"), "--state", "no-redis"),),
    *((("install", name), "--state", "no-redis") for name in ("claude-code", "pi")),
    (("serve",), "--http", "port-in-use"),
]


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    option: str  # as the message must name it (an option string, or a positional's metavar)
    value: str  # VALUES key
    hook: bool = False

    @property
    def label(self) -> str:
        return f"{' '.join(self.argv)}  [{self.value}]"


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=command)
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    return parser


def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], argparse.Action, argparse.ArgumentParser]]:
    """(command path, action, the parser that holds it) for every action, TARGETs too."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _leaves(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield path, action, parser


def kind_of(action: argparse.Action) -> str | None:
    """The KINDS key of an option that takes a value; None for a flag."""
    if action.nargs == 0:
        return None
    if action.choices:
        return "choices"
    return str(action.metavar or getattr(action.type, "__name__", "") or "")


def base(
    path: tuple[str, ...], action: argparse.Action, parser: argparse.ArgumentParser
) -> list[str]:
    """The rest of a command line that would work, around the option under test."""
    command = path[0]
    if command == "serve":
        http = any(
            action in group._group_actions
            for group in parser._action_groups
            if (group.title or "").startswith("HTTP")
        )
        if action.dest == "http":
            return []
        return ["--http", "127.0.0.1:0"] if http else ["--stdio"]
    if command in ("analyze", "replay", "calibrate") and action.option_strings:
        return [str(TRANSCRIPT)]
    if command == "reset" and action.option_strings:
        return ["someone"]
    if path[1:] == ("mcp",) and action.option_strings and action.dest != "file":
        return ["cursor"]  # the client whose file the option is about
    return []


def tail(
    path: tuple[str, ...], action: argparse.Action, parser: argparse.ArgumentParser
) -> list[str]:
    """What must follow the option under test: the relay's server command comes last (a
    server that exits at once, so a value wrongly taken ends in exit 0, not a hang), or
    over HTTP an upstream nothing answers on."""
    if path[0] != "mcp" or not action.option_strings:
        return []
    http = [
        a.dest
        for group in parser._action_groups
        if (group.title or "").startswith("Streamable HTTP")
        for a in group._group_actions
    ]
    if action.dest not in http:
        return ["--", sys.executable, "-c", "pass"]
    upstream = "http://127.0.0.1:1/mcp"
    return {"http": ["--upstream", upstream], "upstream": ["--http", "127.0.0.1:0"]}.get(
        action.dest, ["--http", "127.0.0.1:0", "--upstream", upstream]
    )


def table(world: World) -> list[Case]:
    """Every option of every subcommand, each with its kind's bad values. The TARGETs of
    install, uninstall and doctor that share an option (the command-hook harnesses share
    all of theirs) take its bad values in turn, so that each target runs and the table
    stays small enough for CI."""
    cases: list[Case] = []
    unknown: list[str] = []
    taker: dict[tuple[str, str, str], tuple[str, ...]] = {}
    for command in COMMANDS:
        leaves = list(_leaves(_parser(command), (command,)))
        sharing: dict[str, list[tuple[str, ...]]] = {}
        for path, action, _ in leaves:
            for name in action.option_strings[:1]:
                sharing.setdefault(name, []).append(path)
        for path, action, parser in leaves:
            if action.option_strings and action.help == argparse.SUPPRESS:
                continue  # a hidden option that exists only to say which command has it
            kind = kind_of(action)
            if kind is None:
                continue
            if kind not in KINDS:
                unknown.append(f"{' '.join(path)} {action.option_strings or action.dest}: {kind!r}")
                continue
            name = action.option_strings[0] if action.option_strings else str(action.metavar)
            for value in KINDS[kind]:
                if (command, name, value) in ACCEPTED:
                    continue
                holders = sharing.get(name, [path])
                if (command, name, value) not in taker:
                    taker[(command, name, value)] = holders[len(taker) % len(holders)]
                if taker[(command, name, value)] != path:
                    continue  # another target of this command takes this one
                given = VALUES[value](world)
                option = [name, given] if action.option_strings else [given]
                argv = (*path, *base(path, action, parser), *option, *tail(path, action, parser))
                cases.append(Case(argv, name, value, hook=command == "hook"))
    # A TARGET the turns passed over still runs once: its first option, empty.
    reached = {case.argv[: len(path)] for case in cases for path in [case.argv[:2]]}
    for command in ("install", "uninstall", "doctor"):
        for path, action, _ in _leaves(_parser(command), (command,)):
            if path not in reached and action.option_strings and kind_of(action):
                cases.append(
                    Case((*path, action.option_strings[0], ""), action.option_strings[0], "empty")
                )
                reached.add(path)
    assert not unknown, "options whose kind the bad-value table does not know:\n" + "\n".join(
        unknown
    )
    for start, option, value in EXTRA:
        cases.append(Case((*start, option, VALUES[value](world)), option, value))
    # A wrong token, against a guard that answers with another one.
    for verb in ("--stop", "--ensure"):
        argv = ("serve", "--http", f"127.0.0.1:{world.guard_port}", verb, "--token", "w" * 32)
        cases.append(Case(argv, "token", "wrong-token"))
    return cases


def check(installed: Installed, env: dict[str, str], world: World, case: Case) -> str | None:
    """What is wrong with how the command answered `case`; None when nothing is."""
    event = json.dumps(pre_tool_use("Bash", {"command": "ls"}, session="bad-input"))
    try:
        done = subprocess.run(
            [str(installed.cli), *case.argv],
            env=env,
            cwd=world.root,
            input=event if case.hook else "",
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
        )
    except subprocess.TimeoutExpired:
        return f"{case.label}: still running after {RUN_SECONDS:.0f} s"
    both = done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    problems = []
    if "Traceback" in both or "internal error" in both:
        problems.append("a traceback")
    if case.hook:
        if done.returncode != 0 or done.stdout.strip():
            problems.append(f"the hook did not allow (exit {done.returncode})")
    elif done.returncode not in (1, 2):
        problems.append(f"exit {done.returncode}")
    said = [line for line in lines if line.startswith(PREFIX)]
    if case.argv[0] == "doctor" and not said:  # a report, its problems the lines to read
        said = [line for line in done.stdout.splitlines() if line.startswith(REPORTED)]
    elif len(lines) != 1 or len(said) != 1:
        problems.append(f"{len(lines)} lines on stderr, {len(said)} with the prefix")
    given = VALUES[case.value](world).strip() if case.value in VALUES else ""
    given = given.removeprefix("redis://").removesuffix("/0")
    word = case.option.lstrip("-").split("-")[0]  # `--config-json`: "config key ..."
    if not any(case.option in line or word in line or (given and given in line) for line in said):
        problems.append("no line names the option or the value")
    if not problems:
        return None
    shown = "\n      ".join((done.stderr or done.stdout).strip().splitlines()[-4:])
    return f"{case.label}: {'; '.join(problems)}\n      {shown}"


def test_every_option_refuses_bad_values_in_one_line(installed: Installed, tmp_path: Path) -> None:
    root = tmp_path / "world"
    root.mkdir()
    (root / "a-directory").mkdir()
    os.mkfifo(root / "a-fifo")
    (root / "a-file.json").write_text("{}")
    env = installed.env
    env["PATH"] = f"{installed.venv / 'bin'}:/usr/bin:/bin"  # no harness CLI: doctor is quick
    with socket.socket() as busy, Service(env, cli=[str(installed.cli)], token=TOKEN) as guard:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        world = World(root, busy.getsockname()[1], guard.port)
        cases = table(world)
        started = time.monotonic()
        with ThreadPoolExecutor(WORKERS) as pool:
            found = list(pool.map(lambda c: check(installed, env, world, c), cases))
        seconds = time.monotonic() - started
    failures = [f for f in found if f is not None]
    print(f"bad-input table: {len(cases)} runs in {seconds:.1f} s ({WORKERS} at once)")
    assert not failures, f"{len(failures)} of {len(cases)} runs:\n" + "\n".join(failures)


# -- the cases of issue 36 -------------------------------------------------------------------


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a command said on stderr; fails on a traceback or more lines."""
    both = done.stdout + done.stderr
    assert "Traceback" not in both and "internal error" not in both, both
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(PREFIX), done.stderr
    return lines[0]


READ_SYSCALLS = {"x86_64": "0", "aarch64": "63"}  # read(2)'s number, for /proc/PID/syscall


def waiting_on_stdin(pid: int, deadline: float) -> bool:
    """Whether process `pid` is blocked reading its stdin (the hook's only read): the kernel
    names the wait (`pipe_read`), or, where it hides that, the syscall is read(0, ...)."""
    read = READ_SYSCALLS.get(os.uname().machine)
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/wchan").read_text().endswith("pipe_read"):
                return True
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
            if read is not None and fields[:2] == [read, "0x0"]:
                return True
        except (OSError, IndexError):
            pass
        time.sleep(0.05)
    return False


def test_ctrl_c_on_a_waiting_hook_allows_the_call_quietly(installed: Installed) -> None:
    """`cat | dsh-circuit-breaker hook --harness claude-code`, then Ctrl-C: was a
    KeyboardInterrupt traceback and exit -2. The hook's one status is 0, a harness reading
    any other as a verdict (2 blocks the call; droid's 3 aborts the agent)."""
    import signal

    hook = subprocess.Popen(
        [str(installed.cli), "hook", "--harness", "claude-code"],
        env=installed.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert waiting_on_stdin(hook.pid, time.monotonic() + RUN_SECONDS), "never read stdin"
        hook.send_signal(signal.SIGINT)  # what the terminal sends its foreground group
        out, err = hook.communicate(timeout=RUN_SECONDS)
    finally:
        hook.kill()
        hook.wait()
    done = subprocess.CompletedProcess(hook.args, hook.returncode, out, err)
    assert hook.returncode == 0 and out == "", (hook.returncode, out, err)
    assert "interrupted" in one_line(done) and "call allowed" in err


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        # A path the command cannot read is bad input: 2 (install mcp said 1).
        (("install", "mcp", "--file", "{missing}"), 2),
        (("install", "mcp", "--file", "{directory}"), 2),
        (("uninstall", "mcp", "--file", "{missing}"), 2),
        (("doctor", "mcp", "--file", "{directory}"), 2),
        (("install", "claude-code", "--config", "{directory}"), 2),
        (("install", "claude-code", "--settings", "{directory}"), 2),
        (("install", "mcp", "--file", "{file}", "--config", "{directory}"), 2),
        (("install", "mcp"), 2),  # neither a client nor --file
        # A file we read but will not change, or a check that failed: 1.
        (("install", "mcp", "--file", "{not-json}"), 1),
        (("install", "claude-code", "--settings", "{not-json}"), 1),
        (("reset", "nobody"), 1),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v),
)
def test_one_exit_code_convention(
    installed: Installed, tmp_path: Path, argv: tuple[str, ...], code: int
) -> None:
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "servers.json").write_text('{"mcpServers": {}}')
    (tmp_path / "broken.json").write_text("{not json")
    where = {
        "missing": str(tmp_path / "missing.json"),
        "directory": str(tmp_path / "a-directory"),
        "file": str(tmp_path / "servers.json"),
        "not-json": str(tmp_path / "broken.json"),
    }
    done = installed.run(*(a.format(**where) for a in argv), timeout=RUN_SECONDS)
    line = one_line(done)
    assert done.returncode == code, (done.returncode, line)


def test_paths_that_hold_no_transcript_say_so_and_fail(
    installed: Installed, tmp_path: Path
) -> None:
    """`replay DIR` over Markdown files printed `0 runs` and exited 0: a report that reads
    as "no loops" for input nothing was read from."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for n in range(31):
        (notes / f"note-{n}.md").write_text(f"# note {n}\n")
    for command in ("replay", "analyze", "calibrate"):
        done = installed.run(command, str(notes), timeout=RUN_SECONDS)
        line = one_line(done)
        assert done.returncode == 2, (command, done.returncode, line)
        assert f"{command}: no transcript read from {notes}" in line, line


def test_a_zstd_transcript_without_the_extra_names_it_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`analyze run.jsonl.zst` without the transcripts extra: was `0 runs`, exit 0."""
    from dsh_circuit_breaker.cli import main

    packed = tmp_path / "run.jsonl.zst"
    packed.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 16)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # its import now fails
    assert main(["analyze", str(packed)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"{PREFIX}analyze: no transcript read from {packed}"), last
    assert "pip install 'dsh-circuit-breaker[transcripts]'" in last
