"""End to end, what only OpenCode (and its fork Kilo Code) has: subagents, which run in a
child session of their own, and the harness's own `doom_loop` check (the same tool with
the identical input three times in a row asks the user for permission). Real CLI, the
plugin our `install` wrote, the scripted model (tests/support/plugin_harnesses.py).
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES, render
from support.fake_openai import function_call
from support.installed import Installed
from support.plugin_harnesses import HARNESSES, Harness, in_scratch_home
from support.polls import poll, runs
from test_plugin_harness_e2e import DENIED, STOPPED, bash, incidents, lines

pytestmark = pytest.mark.timeout(600)

FAMILY = [name for name in ("opencode", "kilo") if name in HARNESSES]
CHILD = "CHILD-TASK"
DOOM_LOOP = "The user rejected permission to use this specific tool call."


@pytest.fixture(params=FAMILY)
def bare(request: pytest.FixtureRequest, installed: Installed) -> Harness:
    """The harness in the installed product's scratch HOME, nothing installed."""
    return in_scratch_home(request.param, installed)


@pytest.fixture
def harness(bare: Harness) -> Harness:
    """The harness with the plugin our `install` wrote."""
    bare.install()
    return bare


class Router:
    """Answers the parent session from `parent` and its subagent (whose first user
    message is the task prompt) from `child`, each ending on its last turn."""

    def __init__(self, parent: list[Any], child: list[Any]) -> None:
        self.queues = {"parent": parent, "child": child}
        self.asked = {"parent": 0, "child": 0}  # model requests of each

    def __call__(self, body: dict[str, Any]) -> Any:
        first = next((m for m in body.get("messages") or [] if m.get("role") == "user"), {})
        who = "child" if CHILD in json.dumps(first.get("content")) else "parent"
        self.asked[who] += 1
        queue = self.queues[who]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def test_a_looping_subagent_is_stopped_and_its_parent_goes_on(harness: Harness) -> None:
    side = harness.work / "side.txt"
    command = f"echo cbprobe4 >> {side}"
    task = {
        "description": "Run the probe",
        "prompt": f"{CHILD}: run it",
        "subagent_type": "general",
    }
    router = Router(
        parent=[function_call("task", task), bash(command, "Once more"), "Parent done."],
        child=[bash(command, "Probe step")],  # forever
    )
    model = harness.model([])
    model.after = router  # every turn is routed
    with model:
        result = harness.run(model, "Delegate the probe to a subagent.")
    assert result.returncode == 0, result.stderr[-3000:]
    assert model.errors == []
    # The child ran the command five times and was refused three, the third time with
    # stop: it asked the model eight times, never again. Then the parent ran the very same
    # command: it has made that call once, so it ran, and the parent finished.
    assert router.asked == {"child": 8, "parent": 3}
    assert lines(side) == ["cbprobe4"] * 6
    # Parent and child requests interleave: read each call's result wherever it was sent.
    texts = {r.call_id: r.text for r in model.tool_results()}
    bash_calls = [c for c in model.tool_uses() if c["name"] == "bash"]
    seen = [texts.get(c["id"]) for c in bash_calls]
    assert [text == DENIED for text in seen] == [False] * 5 + [True] * 2 + [False, False]
    parent = harness.session_id(result)
    (spawn,) = [
        e for e in result.events() if e["type"] == "tool_use" and e["part"]["tool"] == "task"
    ]
    meta = spawn["part"]["state"]["metadata"]
    assert meta["parentSessionId"] == parent and meta["sessionId"] != parent
    # The stopping refusal went to no model, and is what the child's session keeps.
    assert seen[7] is None
    assert harness.exported_result(meta["sessionId"], bash_calls[7]["id"]) == DENIED  # type: ignore[attr-defined]
    # The parent's model was told why its subagent ended, as the task's result.
    failed = harness.subagent_failed.format(task_id=meta["sessionId"], error=STOPPED)  # type: ignore[attr-defined]
    (task_call,) = [c for c in model.tool_uses() if c["name"] == "task"]
    assert texts[task_call["id"]] == failed
    # The first duplicate, then the first stop (three refusals in a row), both the child's.
    logged = incidents(harness)
    assert [i["kind"] for i in logged] == ["duplicate", "stop"]
    assert {i["agent"] for i in logged} == {meta["sessionId"]}  # the child, by its own id


def test_doom_loop_across_turns_never_fires_the_breaker_does(harness: Harness) -> None:
    # One identical call per model reply: doom_loop looks only inside one reply (the last
    # three tool parts of one assistant message), so it never fires; the breaker refuses
    # the 6th, even though the input is identical (description included). Seven calls: an
    # 8th would be the third refusal in a row, and stop the run.
    side = harness.work / "side.txt"
    turns = [bash(f"echo cbprobe4 >> {side}", "Same") for _ in range(7)]
    with harness.model([*turns, "Done."]) as model:
        result = harness.run(model, "Run the probe seven times.")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "permission requested: doom_loop" not in result.stderr
    assert lines(side) == ["cbprobe4"] * 5
    assert [r.text == DENIED for r in model.tool_results()] == [False] * 5 + [True] * 2


def test_doom_loop_in_one_reply_fires_first_and_ends_a_run(harness: Harness) -> None:
    # Four identical calls in one reply: doom_loop asks at the third (before the breaker,
    # which allows five); `run` has no one to ask, rejects it, and the run ends in error.
    side = harness.work / "side.txt"
    same = [bash(f"echo cbprobe4 >> {side}", "Same") for _ in range(4)]
    with harness.model([same, "Done."]) as model:
        result = harness.run(model, "Run the probe four times at once.")
    assert result.returncode == 1
    assert "permission requested: doom_loop (bash); auto-rejecting" in result.stderr
    errors = [e["error"] for e in result.events() if e["type"] == "error"]
    assert errors[0]["data"]["message"] == DOOM_LOOP
    assert tuple(errors[1:]) == harness.doom_loop_epilogue  # type: ignore[attr-defined]
    assert not any(DENIED in r.text for r in model.tool_results())
    assert incidents(harness) == []
    # The calls run in parallel: those started before the rejection ran (varies by run).
    assert len(lines(side)) <= 4


def test_with_auto_doom_loop_is_approved_and_the_breaker_refuses(harness: Harness) -> None:
    # `run --auto` approves doom_loop's question: seven identical calls in one reply all
    # reach the breaker, which lets five run and refuses two (an 8th would stop the run).
    side = harness.work / "side.txt"
    same = [bash(f"echo cbprobe4 >> {side}", "Same") for _ in range(7)]
    with harness.model([same, "Done."]) as model:
        result = harness.run(model, "Run the probe seven times at once.", flags=("--auto",))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "permission requested: doom_loop" not in result.stderr
    assert lines(side) == ["cbprobe4"] * 5
    assert sorted(r.text == DENIED for r in model.tool_results()) == [False] * 5 + [True] * 2


def probe_refusals(harness: Harness, limit: int) -> None:
    """Run the probe; `limit - 1` calls run, the limit-th and the next are refused."""
    side = harness.work / "side.txt"
    turns = [bash(f"echo cbprobe4 >> {side}", f"Step {i}") for i in range(limit + 1)]
    with harness.model([*turns, "Done."]) as model:
        result = harness.run(model, "Run the probe.")
    assert result.returncode == 0, result.stderr[-3000:]
    assert lines(side) == ["cbprobe4"] * (limit - 1)
    refused = render(DEFAULT_MESSAGES["duplicate"], "bash", "duplicate", limit, limit)
    ran = [False] * (limit - 1)
    assert [r.text == refused for r in model.tool_results()] == ran + [True] * 2
    (start,) = harness.starts(result)
    assert start["ok"] and start["config"]["duplicateLimit"] == limit


def test_plugin_list_entry_with_options_configures_the_adapter(bare: Harness) -> None:
    # The harness's own way to configure a plugin: `["<spec>", {options}]` in the config
    # file's `plugin` list. The adapter loaded by its file URL takes the options as config.
    options = {"python": str(bare.product.python), "duplicateLimit": 4}
    bare.extra_config = {"plugin": [[bare.adapter_file.as_uri(), options]]}  # type: ignore[attr-defined]
    probe_refusals(bare, 4)


def test_local_npm_package_added_with_the_harness_plugin_command(bare: Harness) -> None:
    # `opencode plugin -g NAME@file:TARBALL` (and `kilo plugin -g`) installs a local npm
    # package offline (the registry is a closed port) and names it in the global config.
    bare.install("--config", str(write(bare.home / "breaker.json", {"duplicateLimit": 5})))
    tarball = pack(bare.home / "pkg", bare.loader.read_text())
    bare.uninstall()
    spec = f"dsh-circuit-breaker-opencode@file:{tarball}"
    added = subprocess.run(
        [str(bare.cli), "plugin", "-g", spec],
        cwd=bare.work,
        env=bare.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert added.returncode == 0, added.stdout + added.stderr
    written = [p.read_text() for p in bare.config_dir.glob("*.json*")]  # type: ignore[attr-defined]
    assert any(spec in text for text in written), added.stdout
    probe_refusals(bare, 5)


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def pack(where: Path, main: str) -> Path:
    """An npm tarball (npm pack's layout) whose main is `main`."""
    manifest = {"name": "dsh-circuit-breaker-opencode", "version": "0.1.0", "type": "module"}
    files = {"package.json": json.dumps({**manifest, "main": "index.js"}), "index.js": main}
    where.mkdir()
    tarball = where / "dsh-circuit-breaker-opencode-0.1.0.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return tarball


# -- issue 32, on the default install: results on, the seed's count, the frozen cycle ----
def frozen_call(side: Path, word: str) -> dict[str, Any]:
    """A call whose answer never changes (`done-WORD`); each real run adds WORD to `side`."""
    return bash(f"echo {word} >> {side}; echo done-{word}", f"Say {word}")


def test_default_install_moving_calls_run_on_and_a_frozen_cycle_is_refused_at_its_7th(
    harness: Harness,
) -> None:
    # Three scripts in one run, none past another's limits: a poll whose output moves, ten
    # copies; a cycle of two calls in turn whose first call's output moves, four rounds;
    # then a cycle of two calls that answer the same every round: its 7th call would
    # start a 4th round with nothing changed, and is refused (rule 5). The 8th is the
    # other call, not the cycle's next, and runs.
    moving, cycled, side = (harness.work / n for n in ("moving.count", "cycled.count", "side"))
    turns = [bash(poll(moving, True), "Poll") for _ in range(10)]
    turns += [
        bash(poll(cycled, True), "Poll") if i % 2 == 0 else frozen_call(side, "c") for i in range(8)
    ]
    turns += [frozen_call(side, "ab"[i % 2]) for i in range(8)]
    with harness.model([*turns, "Done."]) as model:
        result = harness.run(model, "Poll the jobs, then do the two steps in turn.")
    assert result.returncode == 0, result.stderr[-3000:]
    assert model.errors == []
    texts = [r.text for r in model.tool_results()]
    assert len(texts) == 26
    assert [t.strip() for t in texts[:10]] == [f"step {n}" for n in range(10)]
    assert (runs(moving), runs(cycled)) == (10, 4)
    assert not [t for t in texts[:24] if "Circuit breaker" in t]
    cycle = render(DEFAULT_MESSAGES["cycle"], "bash", "duplicate", 3, 3, 2)
    assert texts[24] == cycle
    assert texts[25].strip() == "done-b"
    assert lines(side) == ["c"] * 4 + ["a", "b"] * 3 + ["b"]
    (incident,) = incidents(harness)
    assert (incident["kind"], incident["count"], incident["limit"]) == ("duplicate", 3, 3)


def test_identical_parallel_calls_are_judged_as_if_their_results_never_came(
    harness: Harness,
) -> None:
    # Five copies of one poll in one reply (`--auto` approves doom_loop's question), each
    # waiting until all five have started, so that every copy is checked before any result
    # comes back; each prints a new time, a moving output. Results of parallel copies
    # cannot be told apart, so none counts as progress: the sixth copy, alone in the
    # next reply, is refused at the limit. (Run one after another, the same poll runs
    # on: the test above.)
    side = harness.work / "side.txt"
    wait = f"for i in $(seq 200); do [ $(wc -l < {side}) -ge 5 ] && break; sleep 0.1; done"
    command = f"echo run >> {side}; {wait}; date +%s%N"
    same = [bash(command, "Poll") for _ in range(5)]
    with harness.model([same, bash(command, "Poll"), "Done."]) as model:
        result = harness.run(model, "Poll five times at once, then once more.", flags=("--auto",))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "permission requested: doom_loop" not in result.stderr
    texts = [r.text for r in model.tool_results()]
    assert len(texts) == 6
    assert len({t.strip() for t in texts[:5]}) == 5  # five runs, five different outputs
    assert not [t for t in texts[:5] if "Circuit breaker" in t]
    assert texts[5] == DENIED
    assert lines(side) == ["run"] * 5
