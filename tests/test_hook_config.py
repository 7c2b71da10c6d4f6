"""The config file loader the hook and the commands share: where it looks, the formats,
DSH patch rows, and loud failures naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh_circuit_breaker import Config, ConfigError
from dsh_circuit_breaker.core.config_file import (
    ENV_CONFIG,
    find_config,
    hook_config,
    load,
    load_config,
)
from dsh_circuit_breaker.harnesses import claude_code


@pytest.fixture(autouse=True)
def private_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.delenv(ENV_CONFIG, raising=False)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_formats_give_the_same_config(tmp_path: Path) -> None:
    toml = write(tmp_path / "a.toml", 'duplicateLimit = 3\nexempt = ["Read"]\nstate = "memory://"')
    as_json = write(tmp_path / "a.json", json.dumps({"duplicate_limit": 3, "exempt": ["Read"]}))
    yaml_file = write(tmp_path / "a.yaml", "duplicateLimit: 3\nexempt: [Read]\n")
    loaded = load(str(toml))
    assert (loaded.config.duplicate_limit, loaded.config.exempt) == (3, ("Read",))
    assert (loaded.state, loaded.path) == ("memory://", str(toml))
    assert load_config(str(as_json)).to_mapping() == loaded.config.to_mapping()
    assert load_config(str(yaml_file)).to_mapping() == loaded.config.to_mapping()


def test_dsh_patch_rows(tmp_path: Path) -> None:
    rows = write(
        tmp_path / "patches.yaml",
        "- id: timeout-policy\n  config: {seconds: 5}\n"
        "- id: circuit-breaker\n  config:\n    duplicateLimit: 4\n    maxCallsPerAgent: 50\n",
    )
    config = load_config(str(rows))
    assert (config.duplicate_limit, config.max_calls_per_agent) == (4, 50)
    single = write(tmp_path / "row.json", json.dumps({"id": "circuit-breaker", "config": {}}))
    assert load_config(str(single)).to_mapping() == Config().to_mapping()
    none = write(tmp_path / "none.json", json.dumps([{"id": "other", "config": {}}]))
    with pytest.raises(ConfigError, match="no patch row with id: circuit-breaker"):
        load_config(str(none))


def test_search_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_config() is None
    assert load().path is None
    user = write(tmp_path / "xdg-config" / "dsh-circuit-breaker" / "config.toml", "window = 50")
    assert find_config() == str(user)
    from_env = write(tmp_path / "env.json", '{"window": 60}')
    monkeypatch.setenv(ENV_CONFIG, str(from_env))
    assert load_config().window == 60
    explicit = write(tmp_path / "cli.json", '{"window": 70}')
    assert load_config(str(explicit)).window == 70


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.json", '{"duplicateLimit": -1}', "duplicateLimit"),
        ("a.json", '{"dupLimit": 3}', "unknown config key 'dupLimit'"),
        ("a.toml", "window = [", "not valid TOML"),
        ("a.yaml", "window: [", "not valid YAML"),
        ("a.json", "{", "not valid JSON"),
        ("a.json", '"just a string"', "must be a mapping"),
        ("a.json", '{"state": "no-scheme"}', "state"),
        ("a.json", '{"window": 3, "duplicateLimit": 6}', "window"),
    ],
)
def test_bad_files_fail_loudly_naming_the_key(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(ConfigError, match=message) as caught:
        load(str(path))
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value) and "<byte string>" not in str(caught.value)


def test_a_yaml_error_is_one_line_naming_the_file_and_the_place(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "window: [\n")
    with pytest.raises(ConfigError) as caught:
        load(str(path))
    assert str(caught.value) == (
        f"{path} is not valid YAML: expected the node content, but found '<stream end>' "
        "(line 2, column 1)"
    )


@pytest.mark.parametrize(
    ("key", "told"),
    [
        ("duplicateLimt", "unknown config key 'duplicateLimt'; did you mean duplicateLimit?"),
        ("max_calls_per_agnt", "did you mean maxCallsPerAgent?"),
        ("zzz", "unknown config key 'zzz' (the README's config table lists the keys)"),
    ],
)
def test_an_unknown_key_suggests_the_near_one(tmp_path: Path, key: str, told: str) -> None:
    path = write(tmp_path / "a.json", json.dumps({key: 4}))
    with pytest.raises(ConfigError) as caught:
        load(str(path))
    assert told in str(caught.value)
    assert "known keys" not in str(caught.value)  # the sixteen names hid the one meant


def test_missing_explicit_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(str(tmp_path / "missing.toml"))
    monkeypatch.setenv(ENV_CONFIG, str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError):
        load()


def test_hook_defaults_and_overrides(tmp_path: Path) -> None:
    config, state = hook_config(None, claude_code)
    assert state is None
    for tool in (*claude_code.EXEMPT, "todo_write"):
        assert not config.guards(tool)
    assert config.guards("Bash")
    assert config.incident_log == str(
        tmp_path / "xdg-state" / "dsh-circuit-breaker" / "incidents.jsonl"
    )
    own = write(tmp_path / "own.json", json.dumps({"exempt": ["Read"], "incidentLog": ""}))
    config, _ = hook_config(str(own), claude_code)
    assert config.guards("TodoWrite") and not config.guards("Read")  # a file's list replaces
    assert config.incident_log is None


def test_handle_in_process_keeps_one_store_open(tmp_path: Path) -> None:
    from dsh_circuit_breaker import hook

    event = {
        "session_id": "in-process",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "make"},
    }
    outs = [hook.handle(event, None, None) for _ in range(8)]
    assert [o is None for o in outs] == [True] * 5 + [False] * 3
    assert json.loads(outs[-1] or "")["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert len(hook._opened) == 1  # earlier stores were closed as new ones opened
    hook._close_opened()
    assert hook._opened == []


def test_budgets_and_stop_from_every_format(tmp_path: Path) -> None:
    toml = write(
        tmp_path / "a.toml",
        'stopAfterDenials = 4\n[toolLimits]\nweb_search = 12\n"mcp__web__*" = 30\n',
    )
    as_json = write(
        tmp_path / "a.json",
        json.dumps({"stop_after_denials": 4, "tool_limits": {"web_search": 12, "mcp__web__*": 30}}),
    )
    yaml_file = write(
        tmp_path / "a.yaml",
        "stopAfterDenials: 4\ntoolLimits:\n  web_search: 12\n  'mcp__web__*': 30\n",
    )
    row = write(
        tmp_path / "patches.yaml",
        "- id: circuit-breaker\n  config:\n    stopAfterDenials: 4\n"
        "    toolLimits: {web_search: 12, 'mcp__web__*': 30}\n",
    )
    configs = [load_config(str(p)) for p in (toml, as_json, yaml_file, row)]
    assert all(c.tool_limits == {"web_search": 12, "mcp__web__*": 30} for c in configs)
    assert all(c.stop_after_denials == 4 for c in configs)
    bad = write(tmp_path / "bad.toml", "[toolLimits]\nweb_search = 0\n")
    with pytest.raises(ConfigError, match="toolLimits: web_search: must be a positive integer"):
        load(str(bad))
