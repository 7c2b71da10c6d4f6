"""`install mcp`, `uninstall mcp`, `doctor mcp`: the relay wrapped around each server of an
MCP client's config file, and taken off again.

Each local (stdio) server entry `{"command": C, "args": [A...], ...}` becomes
`{"command": PYTHON, "args": ["-c", PROGRAM, "mcp", "--name", NAME, ..., "--", C, A...]}`:
this interpreter runs the relay (`guard/mcp.py`), which starts the original server. Only
`command` and `args` change; every other key of the entry (`env`, `cwd`, `type`, ...)
and every other byte of the file stay as they were (JSON with comments too, `_jsonc`).
`uninstall` takes the original command and arguments back out of the relay's command
line. An entry that had no `args` at all is remembered in `STATE_FILE` (names only), so
it comes back without one. Remote entries (a URL) are left alone: the stdio relay cannot
stand in front of them.

Where each client keeps its servers, and under which key, is `CLIENTS` (docs/mcp.md says
where each came from).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.config import ConfigError
from ..core.config_file import hook_config, state_url
from ..core.files import default_state_dir
from ..core.invocation import HOOK_PROGRAM, OLD_HOOK_PROGRAM, entry_point
from ..core.stores import StoreUnavailable, store_from_url
from ..usage import FAILED, USAGE, error
from . import _jsonc
from ._doctor import Report, doctor_config_and_state
from ._settings import SettingsError, Unreadable, backup_note, restored_text, write_text

if TYPE_CHECKING:  # `_contract` stands on Protocols the kernel declares for mypy only
    from ._contract import Harness

RELAY_VERB = "mcp"
STATE_FILE = "mcp-installs.json"  # in the state directory: entries installed without `args`
REMOTE_KEYS = ("url", "serverUrl", "httpUrl")


def _home() -> Path:
    return Path.home()


def _appdata() -> Path:
    return Path(os.environ.get("APPDATA") or _home() / "AppData" / "Roaming")


def _xdg_config() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or _home() / ".config")


def _app_support() -> Path:
    return _home() / "Library" / "Application Support"


def _per_os(
    mac: Callable[[], Path], windows: Callable[[], Path], other: Callable[[], Path]
) -> Path:
    if sys.platform == "darwin":
        return mac()
    return windows() if sys.platform == "win32" else other()


@dataclass(frozen=True)
class Client:
    name: str  # `install mcp NAME`
    label: str
    key: str  # the top-level key holding the servers
    user: Callable[[], Path]
    project: str | None = None  # the file under a project directory, if it has one


CLIENTS = {
    c.name: c
    for c in (
        Client(
            "claude-desktop",
            "Claude Desktop",
            "mcpServers",
            lambda: _per_os(
                lambda: _app_support() / "Claude" / "claude_desktop_config.json",
                lambda: _appdata() / "Claude" / "claude_desktop_config.json",
                lambda: _xdg_config() / "Claude" / "claude_desktop_config.json",
            ),
        ),
        Client(
            "cursor",
            "Cursor",
            "mcpServers",
            lambda: _home() / ".cursor" / "mcp.json",
            ".cursor/mcp.json",
        ),
        Client(
            "vscode",
            "VS Code",
            "servers",
            lambda: _per_os(
                lambda: _app_support() / "Code" / "User" / "mcp.json",
                lambda: _appdata() / "Code" / "User" / "mcp.json",
                lambda: _xdg_config() / "Code" / "User" / "mcp.json",
            ),
            ".vscode/mcp.json",
        ),
        Client(
            "windsurf",
            "Windsurf",
            "mcpServers",
            lambda: _home() / ".codeium" / "windsurf" / "mcp_config.json",
        ),
        Client(
            "zed",
            "Zed",
            "context_servers",
            lambda: _per_os(
                lambda: _home() / ".config" / "zed" / "settings.json",
                lambda: _appdata() / "Zed" / "settings.json",
                lambda: _xdg_config() / "zed" / "settings.json",
            ),
            ".zed/settings.json",
        ),
        Client("lm-studio", "LM Studio", "mcpServers", lambda: _home() / ".lmstudio" / "mcp.json"),
    )
}


class McpInstallError(Exception):
    """Options that do not name one file to act on; the message says what is wrong."""


def _exit_code(exc: Exception) -> int:
    """The one convention (usage.py): what the person gave (options, a config that does not
    load, a path that cannot be read) is 2; a file we will not change is 1."""
    if isinstance(exc, SettingsError):
        return exc.code
    return USAGE if isinstance(exc, (ConfigError, McpInstallError)) else FAILED


# -- arguments -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, action: str) -> None:
    parser.add_argument(
        "client",
        nargs="?",
        metavar="CLIENT",
        choices=sorted(CLIENTS),
        help=f"the MCP client whose config to {'check' if action == 'doctor' else 'change'}: "
        f"{', '.join(sorted(CLIENTS))}",
    )
    parser.add_argument(
        "--file", metavar="FILE", help="any JSON file with an `mcpServers` object, instead"
    )
    parser.add_argument(
        "--key",
        metavar="NAME",
        default=None,
        help="the key holding the servers in --file (default: mcpServers)",
    )
    parser.add_argument(
        "--project",
        metavar="DIR",
        default=None,
        help="the client's file in this project (Cursor, VS Code, Zed) instead of the user's",
    )
    if action == "install":
        parser.add_argument("--config", metavar="FILE", help="config file the relay reads")
        parser.add_argument("--state", metavar="URL", help="state URL the relay uses")
    if action != "doctor":
        parser.add_argument(
            "--no-backup", action="store_true", help="do not back up the file before changing it"
        )


def target(args: argparse.Namespace) -> tuple[str, Path, str]:
    """(label, file, key) the options name."""
    if bool(args.client) == bool(args.file):
        raise McpInstallError("name a client or give --file FILE (one of them)")
    if args.file:
        return "MCP config", Path(args.file).expanduser().absolute(), args.key or "mcpServers"
    client = CLIENTS[args.client]
    if args.key:
        raise McpInstallError(
            f"--key is for --file; {client.label} keeps its servers in {client.key}"
        )
    if args.project is None:
        return client.label, client.user(), client.key
    if client.project is None:
        raise McpInstallError(f"{client.label} has no project file; leave out --project")
    return client.label, Path(args.project).expanduser().absolute() / client.project, client.key


# -- the file ------------------------------------------------------------------------------


def read(path: Path, key: str) -> tuple[str, dict[str, Any]]:
    """The file's text and its servers (key -> entry); SettingsError for a file we must
    not change."""
    if path.is_symlink():
        raise SettingsError(f"{path} is a link; not touching it")
    if path.exists() and not path.is_file():
        raise Unreadable(f"{path} is not a regular file; not touching it")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Unreadable(f"{path} does not exist: no servers to wrap") from None
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = _jsonc.loads(text)
    except ValueError as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc}); not changing it") from None
    servers = data.get(key) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise SettingsError(f"{path} has no `{key}` object: no servers to wrap")
    return text, servers


def command_of(entry: Any) -> tuple[dict[str, Any], str, list[str]] | None:
    """(the object holding `command`/`args`, command, args) of a local server entry; None
    for a remote or unusable one. Zed also has `"command": {"path": ..., "args": [...]}`."""
    if not isinstance(entry, dict) or any(k in entry for k in REMOTE_KEYS):
        return None
    holder: dict[str, Any] = entry
    command = entry.get("command")
    if isinstance(command, dict):
        holder, command = command, command.get("path")
    args = holder.get("args", [])
    if not isinstance(command, str) or not command:
        return None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return None
    return holder, command, args


def relay_argv(command: str, args: list[str]) -> list[str] | None:
    """The relay's own options and the original command line, if this runs our relay."""
    if os.path.basename(command) == "dsh-circuit-breaker" and args[:1] == [RELAY_VERB]:
        ours = args[1:]
    elif args[:3] in (["-c", program, RELAY_VERB] for program in (HOOK_PROGRAM, OLD_HOOK_PROGRAM)):
        ours = args[3:]
    else:
        return None
    return ours if "--" in ours else None


def wrapped(entry: dict[str, Any], name: str, options: list[str]) -> dict[str, Any]:
    """`entry` with its command run through the relay (`options`: --config/--state)."""
    found = command_of(entry)
    assert found is not None
    holder, command, args = found
    argv = [command, *args]
    relay = [*entry_point(), RELAY_VERB]
    new_args = [*relay[1:], "--name", _server_name(name), *options, "--", *argv]
    new_holder: dict[str, Any] = {}
    for k, v in holder.items():
        if k == "command" or k == "path":
            new_holder[k] = relay[0]
            if "args" not in holder:
                new_holder["args"] = new_args
        else:
            new_holder[k] = new_args if k == "args" else v
    return new_holder if holder is entry else {**entry, "command": new_holder}


def unwrapped(entry: dict[str, Any], had_args: bool) -> dict[str, Any]:
    found = command_of(entry)
    assert found is not None
    holder, command, args = found
    ours = relay_argv(command, args)
    assert ours is not None
    original = ours[ours.index("--") + 1 :]
    new_holder: dict[str, Any] = {}
    for k, v in holder.items():
        if k in ("command", "path"):
            new_holder[k] = original[0] if original else ""
        elif k == "args":
            if had_args or original[1:]:
                new_holder[k] = original[1:]
        else:
            new_holder[k] = v
    return new_holder if holder is entry else {**entry, "command": new_holder}


def _server_name(name: str) -> str:
    # The relay's --name is printable with no '/' (it becomes `name/tool`).
    cleaned = "".join(c if c.isprintable() and c != "/" else "_" for c in name)
    return cleaned or "server"


# -- the record of entries that had no `args` ----------------------------------------------


def _record_path() -> Path:
    return Path(default_state_dir()) / STATE_FILE


def _record() -> dict[str, list[str]]:
    try:
        data = json.loads(_record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_record(path: Path, names: set[str]) -> None:
    record = _record()
    if names:
        record[str(path)] = sorted(names)
    else:
        record.pop(str(path), None)
    write_text(_record_path(), json.dumps(record, indent=2) + "\n", backup=False)


# -- install / uninstall -------------------------------------------------------------------


def check_relay_options(config: str | None, state: str | None, harness: Harness) -> list[str]:
    """The relay's --config/--state, refused now if the relay would refuse them later
    (`harness`: the `mcp` module, whose spellings the relay loads the config with)."""
    loaded, file_state = hook_config(config, harness)  # ConfigError for a bad file
    try:
        store_from_url(state_url(state, file_state), loaded).close()
    except StoreUnavailable as exc:
        print(f"warning: the state store is not reachable now: {exc}")
    options = []
    if config:
        options += ["--config", os.path.abspath(os.path.expanduser(config))]
    if state:
        options += ["--state", state]
    return options


def install(args: argparse.Namespace, harness: Harness) -> int:
    try:
        label, path, key = target(args)
        options = check_relay_options(args.config, args.state, harness)
        text, servers = read(path, key)
        changes: dict[str, Any] = {}
        no_args = set(_record().get(str(path), []))
        for name, entry in servers.items():
            found = command_of(entry)
            if found is None:
                print(f"  {name}: not a local (stdio) server; left as it is")
                continue
            holder, command, arguments = found
            ours = relay_argv(command, arguments)
            base = unwrapped(entry, name not in no_args) if ours is not None else entry
            if ours is None and "args" not in holder:
                no_args.add(name)
            new = wrapped(base, name, options)
            if new != entry:
                changes[name] = new
            print(f"  {name}: {'wrapped' if ours is None else 'already wrapped'}")
    except (ConfigError, McpInstallError, SettingsError, ValueError) as exc:
        return error(f"install mcp: {exc}", _exit_code(exc))
    if not changes:
        print(
            f"{label}: already installed in {path}" if servers else f"{label}: no servers in {path}"
        )
        return 0
    saved = write_text(path, _jsonc.replace(text, key, changes), backup=not args.no_backup)
    _save_record(path, no_args)
    note = backup_note(saved, not args.no_backup)
    print(f"{label}: {len(changes)} server(s) now run through the relay in {path}{note}")
    which = f"--file {shlex.quote(str(path))}" if args.file else args.client
    if args.project:
        which += f" --project {shlex.quote(args.project)}"
    print(f"restart {label} to use them; check them: dsh-circuit-breaker doctor mcp {which}")
    return 0


def uninstall(args: argparse.Namespace) -> int:
    try:
        label, path, key = target(args)
        text, servers = read(path, key)
        no_args = set(_record().get(str(path), []))
        changes = {}
        for name, entry in servers.items():
            found = command_of(entry)
            if found is not None and relay_argv(found[1], found[2]) is not None:
                changes[name] = unwrapped(entry, name not in no_args)
    except (McpInstallError, SettingsError, ValueError) as exc:
        return error(f"uninstall mcp: {exc}", _exit_code(exc))
    if not changes:
        print(f"{label}: no server runs through the relay in {path}; nothing changed")
        return 0
    new = _jsonc.replace(text, key, changes)
    # The user's own bytes where a backup holds exactly what is left (our relay the only change).
    new = restored_text(path, _jsonc.loads(new), _jsonc.loads) or new
    saved = write_text(path, new, backup=not args.no_backup)
    _save_record(path, no_args - set(changes))
    note = backup_note(saved, not args.no_backup)
    print(f"{label}: {', '.join(changes)} put back as they were in {path}{note}")
    return 0


# -- doctor --------------------------------------------------------------------------------

DOCTOR_TIMEOUT = 60.0  # seconds for one server to start and list its tools (npx may fetch)


def doctor(args: argparse.Namespace, harness: Harness) -> int:
    """Each wrapped server starts through the relay and lists its tools; the config and
    state the relay runs with are valid (`harness`: as `check_relay_options`'s)."""
    report = Report()
    try:
        label, path, key = target(args)
        _, servers = read(path, key)
    except (McpInstallError, SettingsError, ValueError) as exc:
        if _exit_code(exc) == USAGE:  # nothing to check: the options name no readable file
            return error(f"doctor mcp: {exc}", USAGE)
        report.problem(str(exc))
        return report.finish()
    ours = {}
    for name, entry in servers.items():
        found = command_of(entry)
        options = relay_argv(found[1], found[2]) if found is not None else None
        if found is None or options is None:
            report.note(f"{name}: not wrapped (`install mcp` wraps local servers)")
        else:
            ours[name] = (entry, found, options)
    if not ours:
        report.problem(
            f"{label}: no server runs through the relay in {path}",
            "dsh-circuit-breaker install mcp",
        )
        return report.finish()
    checked: set[tuple[str | None, str | None]] = set()
    for name, (entry, (holder, command, arguments), options) in ours.items():
        relay = _relay_options(options)
        if relay not in checked:
            checked.add(relay)
            doctor_config_and_state(report, relay[0], relay[1], harness)
        try:
            tools = list_tools([command, *arguments], entry, holder)
        except Exception as exc:  # what a server does is its own: say it, never a traceback
            report.problem(f"{name}: did not list its tools through the relay: {exc}")
            continue
        shown = ", ".join(tools[:8]) + (", ..." if len(tools) > 8 else "")
        report.ok(f"{name}: {len(tools)} tool(s) through the relay ({shown})")
    return report.finish()


def _relay_options(options: list[str]) -> tuple[str | None, str | None]:
    mine = options[: options.index("--")]
    pairs = dict(zip(mine[::2], mine[1::2], strict=False))
    return pairs.get("--config"), pairs.get("--state")


def list_tools(argv: list[str], entry: dict[str, Any], holder: dict[str, Any]) -> list[str]:
    """Start `argv` as the client would (its `env` and `cwd`), speak MCP 2025-11-25 to it,
    and return the names `tools/list` gives (every page)."""
    env = {
        **os.environ,
        **{k: str(v) for k, v in (holder.get("env") or entry.get("env") or {}).items()},
    }
    cwd = entry.get("cwd") if isinstance(entry.get("cwd"), str) else None
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    lines: queue.Queue[bytes] = queue.Queue()
    stdout, errors = process.stdout, process.stderr
    stderr: list[bytes] = []

    def read_out() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read_out, daemon=True).start()
    threading.Thread(target=lambda: stderr.extend(errors), daemon=True).start()

    def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        process.stdin.flush()

    def answer(request_id: int) -> dict[str, Any]:
        deadline = time.monotonic() + DOCTOR_TIMEOUT
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                said = b"".join(stderr).decode(errors="replace").strip().splitlines()[-3:]
                raise TimeoutError(
                    f"no answer in {DOCTOR_TIMEOUT:.0f} s; it said: {' | '.join(said) or 'nothing'}"
                ) from None
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(message, dict)
                and message.get("id") == request_id
                and "method" not in message
            ):
                if "error" in message:
                    raise RuntimeError(f"error {message['error']}")
                result: dict[str, Any] = message.get("result") or {}
                return result

    try:
        info = {"name": "dsh-circuit-breaker-doctor", "version": "1"}
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": info}
        send({"id": 1, "method": "initialize", "params": params})
        answer(1)
        send({"method": "notifications/initialized"})
        names: list[str] = []
        cursor = None
        for page in range(2, 100):
            send(
                {"id": page, "method": "tools/list", "params": {"cursor": cursor} if cursor else {}}
            )
            result = answer(page)
            names += [t.get("name", "?") for t in result.get("tools", []) if isinstance(t, dict)]
            cursor = result.get("nextCursor")
            if not cursor:
                return names
        return names
    finally:
        process.stdin.close()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
