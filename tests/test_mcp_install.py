"""`install mcp` / `uninstall mcp` / `doctor mcp` on each client's own file shape, in a
scratch HOME: local servers are wrapped in the relay, remote ones left alone, everything
else in the file kept byte for byte (comments too), and uninstall gives each entry back
as it was. `doctor mcp` starts each wrapped entry and lists its tools through the relay,
with the real `@modelcontextprotocol/server-everything`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker.cli import main
from dsh_circuit_breaker.harnesses import _jsonc
from dsh_circuit_breaker.harnesses._mcp_clients import CLIENTS, HOOK_PROGRAM

EVERYTHING = Path(__file__).parent / "e2e" / "node_modules" / ".bin" / "mcp-server-everything"
LOCAL = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}
BARE = {"env": {"TOKEN": "x"}, "command": "my-server"}  # no `args` at all, `env` first
REMOTE = {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer t"}}
# Where each client's user file is under HOME on Linux, per docs/mcp.md.
USER_FILES = {
    "claude-desktop": ".config/Claude/claude_desktop_config.json",
    "cursor": ".cursor/mcp.json",
    "vscode": ".config/Code/User/mcp.json",
    "windsurf": ".codeium/windsurf/mcp_config.json",
    "zed": ".config/zed/settings.json",
    "lm-studio": ".lmstudio/mcp.json",
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.delenv("DSH_CIRCUIT_BREAKER_CONFIG", raising=False)
    monkeypatch.delenv("DSH_CIRCUIT_BREAKER_STATE", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    return home


def cli(*args: str) -> int:
    try:
        return main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)


def write(path: Path, data: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2)
    path.write_text(text)
    return text


def relay_of(entry: dict[str, Any]) -> list[str]:
    """The command line a wrapped entry runs, checked to be this interpreter's relay."""
    assert entry["command"] == str(Path(sys.executable).absolute())
    assert entry["args"][:3] == ["-c", HOOK_PROGRAM, "mcp"]
    args: list[str] = entry["args"][3:]
    return args


def test_every_client_is_tested() -> None:
    assert sorted(CLIENTS) == sorted(USER_FILES)


@pytest.mark.parametrize("client", sorted(USER_FILES))
def test_install_wraps_local_servers_and_uninstall_puts_them_back(
    client: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = CLIENTS[client].key
    path = home / USER_FILES[client]
    original = {"before": [1, 2], key: {"files": LOCAL, "bare": BARE, "web": REMOTE}, "after": 3}
    text = write(path, original)
    assert cli("install", "mcp", client) == 0
    out = capsys.readouterr().out
    assert f"2 server(s) now run through the relay in {path}" in out
    data = json.loads(path.read_text())
    assert list(data) == list(original) and data["before"] == [1, 2] and data["after"] == 3
    servers = data[key]
    assert servers["web"] == REMOTE  # a remote server: the stdio relay cannot front it
    assert relay_of(servers["files"]) == ["--name", "files", "--", "npx", *LOCAL["args"][:]]
    assert relay_of(servers["bare"]) == ["--name", "bare", "--", "my-server"]
    assert list(servers["bare"]) == ["env", "command", "args"]  # the rest in its place
    assert servers["bare"]["env"] == BARE["env"]
    backups = list(path.parent.glob(path.name + ".bak-*"))
    assert [b.read_text() for b in backups] == [text]

    assert cli("install", "mcp", client) == 0  # again: nothing to do
    assert "already installed" in capsys.readouterr().out
    assert cli("uninstall", "mcp", client) == 0
    assert "put back as they were" in capsys.readouterr().out
    restored = json.loads(path.read_text())
    assert restored == original
    assert list(restored[key]["bare"]) == list(BARE)  # no `args` key added, none left
    assert cli("uninstall", "mcp", client) == 0
    assert "nothing changed" in capsys.readouterr().out


def test_comments_and_layout_outside_the_servers_stay(home: Path) -> None:
    path = home / USER_FILES["zed"]
    path.parent.mkdir(parents=True)
    head = '// Zed settings\n{\n  "theme": "One Dark", // mine\n  /* a "block" comment, */\n'
    text = (
        head + '  "context_servers": {\n    // the demo\n'
        '    "demo": {"command": "srv", "args": ["a"]},\n'
        '    "ext": {"settings": {}},\n  },\n  "url": "http://x//y",\n}\n'
    )
    path.write_text(text)
    assert cli("install", "mcp", "zed", "--no-backup") == 0
    after = path.read_text()
    assert after.startswith(head + '  "context_servers": {\n    // the demo\n    "demo": {\n')
    assert after.endswith('    "ext": {"settings": {}},\n  },\n  "url": "http://x//y",\n}\n')
    assert not list(path.parent.glob("*.bak-*"))
    assert cli("uninstall", "mcp", "zed", "--no-backup") == 0
    back = path.read_text()
    assert _jsonc.loads(back) == _jsonc.loads(text)
    assert back.startswith(head) and back.endswith(after[after.index('    "ext"') :])


def test_zeds_older_nested_command_form(home: Path) -> None:
    path = home / USER_FILES["zed"]
    nested = {"source": "custom", "command": {"path": "srv", "args": ["-v"], "env": {}}}
    original = {"context_servers": {"old": nested}}
    write(path, original)
    assert cli("install", "mcp", "zed") == 0
    entry = json.loads(path.read_text())["context_servers"]["old"]
    assert entry["source"] == "custom" and entry["command"]["env"] == {}
    assert entry["command"]["path"] == str(Path(sys.executable).absolute())
    assert entry["command"]["args"][-4:] == ["old", "--", "srv", "-v"]
    assert cli("uninstall", "mcp", "zed") == 0
    assert json.loads(path.read_text()) == original


def test_a_project_file_and_any_file(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    vscode = project / ".vscode" / "mcp.json"
    write(vscode, {"inputs": [], "servers": {"s": {"type": "stdio", **LOCAL}}})
    assert cli("install", "mcp", "vscode", "--project", str(project)) == 0
    entry = json.loads(vscode.read_text())["servers"]["s"]
    assert entry["type"] == "stdio" and relay_of(entry)[-3:] == LOCAL["args"]
    other = tmp_path / "agent.json"
    write(other, {"mcpServers": {"s": LOCAL}})
    assert cli("install", "mcp", "--file", str(other), "--state", "memory://") == 0
    assert relay_of(json.loads(other.read_text())["mcpServers"]["s"])[:5] == [
        "--name",
        "s",
        "--state",
        "memory://",
        "--",
    ]
    assert cli("install", "mcp", "windsurf", "--project", str(project)) == 2  # it has none


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--config", "{bad}"], "duplicateLimit"),
        (["--state", "nowhere"], "has no scheme"),
        (["--state", "ftp://x"], "unknown scheme"),
    ],
)
def test_refused_before_writing(
    options: list[str], says: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = home / USER_FILES["cursor"]
    text = write(path, {"mcpServers": {"s": LOCAL}})
    if options[0] == "--config":
        bad = home / "breaker.json"
        bad.write_text(json.dumps({"duplicateLimit": "six"}))
        options = ["--config", str(bad)]
    assert cli("install", "mcp", "cursor", *options) == 2  # bad usage (README, Development)
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()  # one line, no traceback
    assert line.startswith("dsh-circuit-breaker: ") and says in line
    assert path.read_text() == text and not list(path.parent.glob("*.bak-*"))


@pytest.mark.parametrize(
    ("content", "says", "code"),
    [
        ("{not json", "is not valid JSON", 1),  # a file it will not change: a failed check
        ('{"other": 1}', "no `mcpServers` object", 1),
        (None, "does not exist", 2),  # a file it cannot read: bad input (README)
    ],
)
def test_a_file_it_must_not_change(
    content: str | None, says: str, code: int, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = home / USER_FILES["cursor"]
    if content is not None:
        path.parent.mkdir(parents=True)
        path.write_text(content)
    for action in ("install", "uninstall"):
        assert cli(action, "mcp", "cursor") == code
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert says in line
    assert (path.read_text() if content is not None else None) == content


def test_jsonc_reads_comments_and_trailing_commas_not_inside_strings() -> None:
    text = '{"a": "//x", /* c */ "b": [1, 2,], // d\n "c": {"e": ",}"},}'
    assert _jsonc.loads(text) == {"a": "//x", "b": [1, 2], "c": {"e": ",}"}}
    assert _jsonc.replace(text, "c", {"e": 5}) == text.replace('",}"', "5")


@pytest.mark.timeout(120)
def test_doctor_lists_the_tools_through_the_relay(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require(EVERYTHING.exists(), "@modelcontextprotocol/server-everything (tests/e2e: npm ci)")
    path = home / USER_FILES["lm-studio"]
    write(path, {"mcpServers": {"everything": {"command": str(EVERYTHING), "args": ["stdio"]}}})
    assert cli("doctor", "mcp", "lm-studio") == 1  # not wrapped yet
    assert "no server runs through the relay" in capsys.readouterr().out
    assert cli("install", "mcp", "lm-studio") == 0
    capsys.readouterr()
    assert cli("doctor", "mcp", "lm-studio") == 0
    out = capsys.readouterr().out
    assert "ok       everything: 13 tool(s) through the relay (echo, " in out, out
    assert out.rstrip().endswith("all good")
