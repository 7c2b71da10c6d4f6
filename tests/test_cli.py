"""The console script: --version and the demo, run as a user would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from dsh_circuit_breaker import __version__
from dsh_circuit_breaker.cli import main
from dsh_circuit_breaker.core.config import Config


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dsh_circuit_breaker.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_version() -> None:
    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"dsh-circuit-breaker {__version__}"


def test_demo_shows_five_allowed_five_denied_the_text_and_the_incident() -> None:
    result = cli("demo")
    assert result.returncode == 0, result.stderr
    verdicts = re.findall(
        r"^call +(\d+): .*->  (allowed|DENIED \(duplicate\)(?:, stop the agent)?)$",
        result.stdout,
        re.M,
    )
    # The original plugin's probe: "the sixth call was denied"; the third refusal in a row,
    # the 8th call, and every one after it stop the agent.
    assert [v for _, v in verdicts] == ["allowed"] * 5 + ["DENIED (duplicate)"] * 2 + [
        "DENIED (duplicate), stop the agent"
    ] * 3
    assert "NOT run, a repeat (copies: 6, limit: 6)" in result.stdout
    assert "this agent is being stopped" in result.stdout
    incidents = [json.loads(line) for line in result.stdout.strip().splitlines()[-2:]]
    assert [i["kind"] for i in incidents] == ["duplicate", "stop"]
    assert all(i["agent"] == "demo-agent" for i in incidents)


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    printed = capsys.readouterr()
    help_text = printed.out + printed.err
    assert help_text.startswith("usage: dsh-circuit-breaker")
    for command in ("demo", "hook", "install", "doctor", "replay"):
        assert command in help_text  # the commands are listed


def test_help_lists_the_commands_and_exits_zero() -> None:
    result = cli("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: dsh-circuit-breaker")
    for command in ("demo", "hook", "install", "doctor", "replay"):
        assert command in result.stdout


def test_the_demo_says_its_stop_setting_and_which_calls_carry_the_stop() -> None:
    """Derived from the defaults, not counted here."""
    config = Config()
    out = cli("demo").stdout
    defaults = out.splitlines()[0]
    assert defaults.startswith("Defaults: ") and f"duplicateLimit={config.duplicate_limit}" in out
    assert f"stopAfterDenials={config.stop_after_denials}" in defaults
    verdicts = re.findall(r"^call +\d+: .*->  (.*)$", out, re.M)
    first = next(i for i, v in enumerate(verdicts) if v != "allowed")
    stop = first + config.stop_after_denials - 1  # the Nth refusal in a row
    assert all(v.startswith("DENIED") for v in verdicts[first:])
    assert [v.endswith(", stop the agent") for v in verdicts[first:]] == [
        i >= stop for i in range(first, len(verdicts))
    ]
    assert f"From call {stop + 1} on, the harness is told to stop the agent" in out


@pytest.mark.parametrize("calls", [1, 3, 5])
def test_a_demo_without_a_denial_has_an_empty_incident_log(calls: int) -> None:
    result = cli("demo", "--calls", str(calls))  # was FileNotFoundError: incidents.jsonl
    assert result.returncode == 0, result.stderr
    assert "Incident log (0 lines):" in result.stdout and "DENIED" not in result.stdout


def test_an_internal_error_is_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_circuit_breaker import demo

    def broken(n: int) -> list[dict[str, str]]:
        raise TypeError("'int' object is not iterable")

    monkeypatch.setattr(demo, "probe_calls", broken)
    monkeypatch.delenv("DSH_CIRCUIT_BREAKER_DEBUG", raising=False)
    assert main(["demo"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "dsh-circuit-breaker: internal error (a bug; DSH_CIRCUIT_BREAKER_DEBUG=1 shows where): "
        "TypeError: 'int' object is not iterable\n"
    )


def test_help_says_what_each_command_and_target_does() -> None:
    top = cli("--help").stdout
    assert "HTTP hooks" in " ".join(top.split())  # serve's summary: both transports
    assert "(a capped subagent)" not in top
    install = cli("install", "claude-code", "--help").stdout
    assert "put the breaker into Claude Code" in install  # the target has a description
    assert "(default: user)" in install  # --scope shows its default
    doctor = " ".join(cli("doctor", "claude-code", "--help").stdout.split())
    assert "written into the hook command" not in doctor  # doctor writes nothing
    assert "checked instead of the one the installed hook command names" in doctor


def test_demo_http_drives_the_guard_as_a_harness_would_and_prints_the_page(
    tmp_path: Path,
) -> None:
    """`demo --http`: the guard started, the probe posted to it as Claude Code's HTTP hook
    does, the page's address printed, the page's API showing the agent by its project,
    and nothing written under HOME (a scratch state and incident log, removed at the end)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state")}
    command = [sys.executable, "-m", "dsh_circuit_breaker.cli", "demo", "--http", "127.0.0.1:0"]
    demo = subprocess.Popen(
        [*command, "--serve-for", "20"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert demo.stdout is not None
        lines = []
        while not lines or not lines[-1].startswith("The live page: "):
            line = demo.stdout.readline()
            assert line, "the demo ended before printing the page's address"
            lines.append(line.strip())
        url = lines[-1].removeprefix("The live page: ")
        origin, token = url.split("/?token=")
        request = urllib.request.Request(
            origin + "/api/agents", headers={"Authorization": f"Bearer {token}"}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=30) as response:
            (agent,) = json.loads(response.read())["agents"]
    finally:
        demo.terminate()
        demo.wait(timeout=30)
    verdicts = [line.split("->  ")[1] for line in lines if line.startswith("call ")]
    alone = cli("demo").stdout
    in_process = re.findall(r"^call +\d+: .*->  (.*)$", alone, re.M)
    assert verdicts == [v.replace(" (duplicate)", "") for v in in_process]  # the same decisions
    assert agent["project"] == tmp_path.name and agent["harness"] == "claude-code"
    assert agent["status"] == "stopped" and agent["repeat"]["preview"] == "echo cbprobe4"
    assert list(home.iterdir()) == []


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_install_and_doctor_list_their_targets_sorted_by_their_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dsh_circuit_breaker.harnesses import target_label, targets

    for command in ("install", "uninstall", "doctor"):
        text = help_of(capsys, command)
        listed = re.findall(r"^    ([a-z-]+) +\S", text, re.M)
        assert listed == sorted(targets()) and len(listed) > 10, listed
        for name in listed:  # each by its label, as people write it (was "put ... into cline")
            assert re.search(rf"^    {name} +.* {re.escape(target_label(name))}$", text, re.M)
    assert "put the breaker into Cline" in help_of(capsys, "install")


def test_install_mcp_help_names_the_clients(capsys: pytest.CaptureFixture[str]) -> None:
    from dsh_circuit_breaker.harnesses._mcp_clients import CLIENTS

    text = " ".join(help_of(capsys, "install", "mcp").split())
    assert ", ".join(sorted(CLIENTS)) in text


def test_a_yaml_config_without_pyyaml_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "breaker.yaml"
    config.write_text("duplicateLimit: 4\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # its import now fails
    assert main(["status", "--config", str(config), "--state", "memory://"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'dsh-circuit-breaker[yaml]'" in err and "pyyaml" not in err, err
