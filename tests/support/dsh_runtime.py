"""Drive the real DeepSeek Harness runtime (deepseek-harness-sdk) against the fake model,
with the plugin and guard of the installed wheel (tests/support/installed.py).

`run_dsh(...)` boots the runtime's SDK profile in a scratch DSH_HOME with the given patch
layers, sends one prompt, and returns what happened: the SDK's RunResult, the fake model
(with every request it got), the runtime's stderr tail, DSH's log messages (captured by
tests/support/dsh_log_capture.mjs), and the circuit-breaker plugin's start markers.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.fake_anthropic import FakeAnthropic
from support.installed import files, the_venv

LOG_CAPTURE = Path(__file__).with_name("dsh_log_capture.mjs")
PROBE_TOOL = "bash"


def dsh_runtime_available() -> bool:
    try:
        import deepseek_harness  # noqa: F401
        from deepseek_harness_runtime import resolve_bundled_launch_args

        resolve_bundled_launch_args()
    except Exception:
        return False
    return True


def dsh_command() -> list[str]:
    from deepseek_harness_runtime import resolve_bundled_launch_args

    return [str(a) for a in resolve_bundled_launch_args()]


def create_profile(home: Path, name: str = "sdk", template: str | None = None) -> None:
    """Have DSH create a profile in `home`, as docs/dsh.md tells a user to: a shipped one
    on first use, or a copy of the shipped `template`."""
    extra = ["--from-default-profile", template] if template else []
    done = subprocess.run(
        [*dsh_command(), "--profile", name, *extra, "--dump-config"],
        capture_output=True,
        text=True,
        env={**os.environ, "DSH_HOME": str(home), "DSH_TELEMETRY_DISABLED": "1"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (home / "profiles" / name / "package.json").is_file()


def yaml_value(value: Any) -> str:
    # JSON is YAML: flow mappings and quoted strings need no YAML library.
    return json.dumps(value)


def insert_row(config: dict[str, Any] | None, entry_id: str = "circuit-breaker") -> str:
    lines = ["- insert:", f"    - id: {entry_id}", f"      name: {yaml_value(str(plugin()))}"]
    if config is not None:
        lines.append(f"      config: {yaml_value(config)}")
    return "\n".join(lines) + "\n"


def override_row(config: dict[str, Any], entry_id: str = "circuit-breaker") -> str:
    return f"- id: {entry_id}\n  config: {yaml_value(config)}\n"


@dataclass
class DshRun:
    home: Path
    work: Path
    model: FakeAnthropic
    result: Any = None  # deepseek_harness.RunResult of the (first) prompt
    results: list[Any] = field(default_factory=list)  # one per prompt, same session
    stderr: list[str] = field(default_factory=list)
    log_file: Path | None = None
    marker_file: Path | None = None
    seconds: float = 0.0

    def log(self) -> list[dict[str, Any]]:
        return _jsonl(self.log_file)

    def warnings(self, logger: str = "circuit-breaker") -> list[str]:
        """Warnings DSH logged under `logger` (the plugin's logger name)."""
        return [
            m["text"] for m in self.log() if m.get("type") == "warn" and m.get("name") == logger
        ]

    def starts(self) -> list[dict[str, Any]]:
        """The plugin's start markers: one per guard start, with its pid."""
        return _jsonl(self.marker_file)


def _jsonl(path: Path | None) -> list[dict[str, Any]]:
    if path is None or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class DshSession:
    """Set up a scratch DSH home and patch layers, then `run(turns)`."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.home = tmp_path / "dsh-home"
        self.work = tmp_path / "work"
        self.home.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        self.patches: list[Path] = []
        self.log_file = tmp_path / "dsh-log.jsonl"
        self.marker_file = tmp_path / "cb-starts.jsonl"
        self.env: dict[str, str] = {}
        # The log capture comes first, so it sees the breaker's startup messages too.
        self.add_patch("capture.yml", insert_row_for(LOG_CAPTURE, {"path": str(self.log_file)}))

    def add_patch(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(text)
        self.patches.append(path)
        return path

    def run(
        self,
        turns: Sequence[Any],
        prompt: str = "Run the probe.",
        timeout: float = 120.0,
        after: Any = "All done.",
        more_prompts: Sequence[str] = (),
    ) -> DshRun:
        from deepseek_harness import DeepSeekHarness, DeepSeekHarnessConfig

        model = FakeAnthropic(turns, after=after)
        run = DshRun(
            home=self.home,
            work=self.work,
            model=model,
            log_file=self.log_file,
            marker_file=self.marker_file,
        )
        env = {
            "DSH_TELEMETRY_DISABLED": "1",
            # No sandbox backend here (no bubblewrap); the breaker is what is under test.
            "DSH_PERMISSION_MODE": "danger-full-access",
            "DSH_CIRCUIT_BREAKER_READY_FILE": str(self.marker_file),
            # Never let the guard find an interpreter by accident in CI: a test sets it.
            "DSH_CIRCUIT_BREAKER_PYTHON": "",
        }
        env.update(self.env)
        with model:
            config = DeepSeekHarnessConfig(
                dsh_home=str(self.home),
                cwd=str(self.work),
                patches=tuple(str(p) for p in self.patches),
                base_url=model.url + "/anthropic",
                api_key="fake-key",
                env=env,
                request_timeout_seconds=timeout,
            )
            started = time.monotonic()
            harness = DeepSeekHarness(config)
            try:
                one_session = harness.start_session()
                for text in (prompt, *more_prompts):
                    run.results.append(one_session.run(text))
                run.result = run.results[0]
            finally:
                run.stderr = list(harness.client._stderr_lines)
                harness.close()
            run.seconds = time.monotonic() - started
        return run


def insert_row_for(path: Path, config: dict[str, Any], entry_id: str = "test-log-capture") -> str:
    return (
        f"- insert:\n    - id: {entry_id}\n      name: {yaml_value(str(path))}\n"
        f"      config: {yaml_value(config)}\n"
    )


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    """Wait until `pid` is reaped by its parent (gone from /proc, not merely a zombie)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.01)
    return False


def plugin() -> Path:
    """The plugin file DSH imports: the one inside the installed wheel."""
    return Path(files(the_venv())["plugin"])


def python() -> str:
    """The guard's interpreter: the installed wheel's venv, not this checkout's."""
    return str(the_venv() / "bin" / "python")
