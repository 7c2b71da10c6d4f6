"""OpenCode (`opencode-ai`): a server plugin in the user's global plugin directory,
`$XDG_CONFIG_HOME/opencode/plugins/` (default `~/.config/opencode/plugins/`), which
OpenCode discovers at every start. The adapter is `js/opencode.mjs`:
`tool.execute.before` throws the refusal, and a stopped session's next model request
fails in `chat.params` with the stop reason; the agent is the session, and a subagent runs
in a child session of its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ._plugin import JS_DIR, Headless, PluginHarness, headless_run, in_user_dir, which
from ._stub_model import MODEL, StubModel

PROVIDER = "dsh-circuit-breaker-doctor"
NAME = "opencode"
LABEL = "OpenCode"
EXEMPT = ("todowrite", "todoread", "question")  # its to-do list and its ask-the-user tool
ANNOTATION_ARGS: tuple[str, ...] = ()


def config_dir(app: str) -> Path:
    """The global config directory (xdg-basedir, as OpenCode and Kilo resolve it)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / app


def doctor_provider(model: StubModel) -> dict[str, object]:
    """A config (OPENCODE_CONFIG_CONTENT, layered over the user's) naming the doctor's model."""
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "dsh-circuit-breaker doctor",
        "options": {"baseURL": model.url, "apiKey": model.token},
        "models": {MODEL: {"name": "dsh-circuit-breaker doctor", "tool_call": True}},
    }
    return {"provider": {PROVIDER: provider}, "model": f"{PROVIDER}/{MODEL}"}


def headless_for(executable: str, env_prefix: str) -> Headless:
    def headless(scratch: Path, model: StubModel) -> tuple[list[str], dict[str, str]]:
        """`run` with the user's config and plugins; the doctor's model layered over the
        config, and a scratch data directory, so the run leaves no session behind."""
        env = {
            f"{env_prefix}_CONFIG_CONTENT": json.dumps(doctor_provider(model)),
            f"{env_prefix}_DISABLE_AUTOUPDATE": "1",
            "XDG_DATA_HOME": str(scratch / "data"),
        }
        argv = [which(executable), "run", "--format", "json", "-m", f"{PROVIDER}/{MODEL}"]
        return [*argv, "Reply with OK."], env

    return headless


HARNESS = PluginHarness(
    name=NAME,
    label=LABEL,
    exempt=EXEMPT,
    annotation_args=ANNOTATION_ARGS,
    adapter=JS_DIR / "opencode.mjs",
    executable="opencode",
    package="opencode-ai",
    plugin_dir=in_user_dir(lambda: config_dir("opencode") / "plugins"),
    boot=headless_run(headless_for("opencode", "OPENCODE")),
    # A first start installs OpenCode's own plugin types into the config directory (npm).
    start_timeout=180.0,
)
add_arguments, install, uninstall, doctor = HARNESS.entry_points()
