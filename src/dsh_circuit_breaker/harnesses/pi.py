"""pi (`@mariozechner/pi-coding-agent`): an extension in the user's extension directory,
`$PI_CODING_AGENT_DIR/extensions/` (default `~/.pi/agent/extensions/`), which pi
discovers at every start. The adapter is `js/pi.mjs`: `tool_call` returns
`{block: true, reason}`, and on a stop also `ctx.abort()`; the agent is the session."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ._plugin import JS_DIR, PluginHarness, headless_run, in_user_dir, which
from ._stub_model import MODEL, StubModel

PROVIDER = "dsh-circuit-breaker-doctor"
NAME = "pi"
LABEL = "pi"
EXEMPT: tuple[str, ...] = ()  # pi has no to-do list or ask-the-user tool
ANNOTATION_ARGS: tuple[str, ...] = ()


def agent_dir() -> Path:
    """pi's own rule (its config.js getAgentDir): $PI_CODING_AGENT_DIR, else ~/.pi/agent."""
    configured = os.environ.get("PI_CODING_AGENT_DIR")
    return Path(os.path.expanduser(configured) if configured else "~/.pi/agent").expanduser()


def headless(scratch: Path, model: StubModel) -> tuple[list[str], dict[str, str]]:
    """pi in print mode with the user's extensions, plus one more (`-e`, this run only)
    that registers the doctor's model as a provider."""
    provider = {
        "baseUrl": model.url,
        "api": "openai-completions",
        "apiKey": model.token,
        "models": [{"id": MODEL, "name": "dsh-circuit-breaker doctor", "input": ["text"]}],
    }
    extension = scratch / "doctor-model.js"
    extension.write_text(
        "export default function (pi) {\n"
        f"  pi.registerProvider({json.dumps(PROVIDER)}, {json.dumps(provider)});\n"
        "}\n",
        encoding="utf-8",
    )
    argv = [which("pi"), "-e", str(extension), "-p", "--provider", PROVIDER, "--model", MODEL]
    return [*argv, "--no-session", "--offline", "Reply with OK."], {}


HARNESS = PluginHarness(
    name=NAME,
    label=LABEL,
    exempt=EXEMPT,
    annotation_args=ANNOTATION_ARGS,
    adapter=JS_DIR / "pi.mjs",
    executable="pi",
    package="@mariozechner/pi-coding-agent",
    plugin_dir=in_user_dir(lambda: agent_dir() / "extensions"),
    boot=headless_run(headless),
    start_timeout=60.0,
)
add_arguments, install, uninstall, doctor = HARNESS.entry_points()
