"""OpenClaw (`openclaw`): a plugin file that OpenClaw loads because its config names it.
`install` writes the loader, `dsh-circuit-breaker.mjs`, beside OpenClaw's config file
(`$OPENCLAW_CONFIG_PATH`, else `openclaw.json` in `$OPENCLAW_STATE_DIR`, default
`~/.openclaw`), adds its path to the config's `plugins.load.paths` and enables it in
`plugins.entries.dsh-circuit-breaker` (with `hooks.allowConversationAccess`: the hook that
sees a typed prompt needs it), leaving every other key as it was. The adapter is
`js/openclaw.mjs`: `before_tool_call` returns `{block: true, blockReason}`, and on a stop
also aborts the session's run.

OpenClaw's config is JSON5; a file that is not JSON with comments and trailing commas (the
JSON5 OpenClaw itself writes) is not rewritten: install says what to add by hand. Comments
in a file it does rewrite are not kept (a backup is).

`doctor openclaw` runs `openclaw agent --local` once against a throwaway model on
127.0.0.1, with a scratch copy of the config (the doctor's provider in it) and a scratch
state directory: the plugin checks its config with the guard as OpenClaw registers it.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.files import read_regular
from ._doctor import Report
from ._jsonc import loads
from ._plugin import JS_DIR, Booted, InstallError, PluginHarness, run_until_ready, which
from ._settings import MAX_SETTINGS_BYTES, write_text
from ._stub_model import MODEL, StubModel

NAME = "openclaw"
LABEL = "OpenClaw"
EXEMPT = ("ask_user",)  # its ask-the-user tool
ANNOTATION_ARGS = ("title",)  # exec's label for the call, the model's to rewrite each time
PLUGIN_ID = "dsh-circuit-breaker"
LOADER = "dsh-circuit-breaker.mjs"
PROVIDER = "dsh-circuit-breaker-doctor"


def config_path() -> Path:
    """OpenClaw's own rule (its config/paths.ts), without its legacy `clawdbot` names."""
    explicit = os.environ.get("OPENCLAW_CONFIG_PATH", "").strip()
    if explicit:
        return Path(explicit).expanduser().absolute()
    state = os.environ.get("OPENCLAW_STATE_DIR", "").strip()
    if state:
        return Path(state).expanduser().absolute() / "openclaw.json"
    home = os.environ.get("OPENCLAW_HOME", "").strip() or "~"
    return Path(home).expanduser().absolute() / ".openclaw" / "openclaw.json"


def read_config(path: Path) -> dict[str, Any]:
    """The config as an object ({} for none); `InstallError` for one we must not rewrite."""
    if not path.is_symlink() and not path.exists():
        return {}
    try:  # never a FIFO, a directory or a link we did not make
        text = read_regular(str(path), MAX_SETTINGS_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"cannot read {path}: {exc}") from None
    if not text.strip():
        return {}
    try:
        data = loads(text)
    except ValueError:
        raise InstallError(
            f"{path} uses JSON5 this installer cannot rewrite (unquoted keys, single quotes, "
            f"...); add this to it by hand:\n{json.dumps(snippet(path), indent=2)}"
        ) from None
    if not isinstance(data, dict):
        raise InstallError(f"{path} does not hold an object; not changing it")
    return data


def snippet(path: Path) -> dict[str, Any]:
    """Our part of the config (what install merges in)."""
    entry = {"enabled": True, "hooks": {"allowConversationAccess": True}}
    paths = [str(path.parent / LOADER)]
    return {"plugins": {"load": {"paths": paths}, "entries": {PLUGIN_ID: entry}}}


def plugins_of(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """`plugins`, checked for what would keep our plugin from loading."""
    plugins = data.get("plugins", {})
    if "$include" in data or (isinstance(plugins, dict) and "$include" in plugins):
        raise InstallError(f"{path} uses $include; add this by hand:\n{json.dumps(snippet(path))}")
    if not isinstance(plugins, dict):
        raise InstallError(f"{path}: `plugins` is not an object; not changing it")
    if plugins.get("enabled") is False:
        raise InstallError(f"{path}: plugins.enabled is false: OpenClaw loads no plugin")
    deny = plugins.get("deny")
    if isinstance(deny, list) and PLUGIN_ID in deny:
        raise InstallError(f"{path}: plugins.deny lists {PLUGIN_ID}; remove it first")
    for key in ("load", "entries"):
        if not isinstance(plugins.get(key, {}), dict):
            raise InstallError(f"{path}: plugins.{key} is not an object; not changing it")
    paths = plugins.get("load", {}).get("paths", [])
    if not isinstance(paths, list):
        raise InstallError(f"{path}: plugins.load.paths is not a list; not changing it")
    return plugins


def with_ours(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The config with our loader path and entry (once), and in `plugins.allow` where the
    user keeps that allowlist (OpenClaw would load nothing else)."""
    plugins = dict(plugins_of(without_ours(data, path), path))
    load = dict(plugins.get("load", {}))
    load["paths"] = [*load.get("paths", []), str(path.parent / LOADER)]
    entries = dict(plugins.get("entries", {}))
    entries[PLUGIN_ID] = snippet(path)["plugins"]["entries"][PLUGIN_ID]
    plugins.update(load=load, entries=entries)
    allow = plugins.get("allow")
    if isinstance(allow, list) and PLUGIN_ID not in allow:
        plugins["allow"] = [*allow, PLUGIN_ID]
    return {**data, "plugins": plugins}


def without_ours(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The config without our loader path and entry; the rest as it was."""
    plugins = data.get("plugins")
    if not isinstance(plugins, dict):
        return data
    plugins = dict(plugins)
    load = plugins.get("load")
    if isinstance(load, dict) and isinstance(load.get("paths"), list):
        ours = str(path.parent / LOADER)
        plugins["load"] = {**load, "paths": [p for p in load["paths"] if p != ours]}
    entries = plugins.get("entries")
    if isinstance(entries, dict) and PLUGIN_ID in entries:
        plugins["entries"] = {k: v for k, v in entries.items() if k != PLUGIN_ID}
    return {**data, "plugins": plugins}


def write_config(path: Path, data: dict[str, Any], backup: bool) -> Path | None:
    return write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n", backup)


def boot(
    harness: PluginHarness, args: argparse.Namespace, scratch: Path, env: dict[str, str]
) -> Booted:
    """One `openclaw agent --local` turn with a scratch copy of the config that names the
    doctor's model, in a scratch state directory (your sessions untouched)."""
    data = read_config(config_path())
    with StubModel() as model:
        provider = {
            "api": "openai-completions",
            "baseUrl": model.url,
            "apiKey": model.token,
            "models": [{"id": MODEL, "name": "dsh-circuit-breaker doctor"}],
        }
        models = dict(data.get("models") or {})
        models["providers"] = {**(models.get("providers") or {}), PROVIDER: provider}
        agents = dict(data.get("agents") or {})
        defaults = dict(agents.get("defaults") or {})
        defaults["model"] = {"primary": f"{PROVIDER}/{MODEL}"}
        agents["defaults"] = defaults
        copy = scratch / "openclaw.json"
        copy.write_text(json.dumps({**data, "models": models, "agents": agents}))
        run_env = {**env, "OPENCLAW_CONFIG_PATH": str(copy), "OPENCLAW_STATE_DIR": str(scratch)}
        argv = [which("openclaw"), "agent", "--local", "--session-id", str(uuid.uuid4())]
        argv += ["-m", "Reply with OK.", "--json"]
        records, output = run_until_ready(
            argv, run_env, scratch, scratch, harness.start_timeout, to_exit=True
        )
    return Booted(records, output)


@dataclass(frozen=True)
class OpenClaw(PluginHarness):
    """The plugin harness whose loader is named in the harness's config file."""

    def prepare(self, args: argparse.Namespace) -> None:
        path = config_path()
        with_ours(read_config(path), path)  # refuses a config it would fail in, before any write
        super().prepare(args)

    def _install(self, args: argparse.Namespace) -> None:
        path = config_path()
        old = read_config(path)
        new = with_ours(old, path)
        if new == old and path.exists():
            print(f"already enabled in {path}")
        else:
            saved = write_config(path, new, backup=path.exists() and not args.no_backup)
            print(f"enabled in {path}" + (f" (backup: {saved})" if saved else ""))
        super()._install(args)

    def _uninstall(self, args: argparse.Namespace) -> None:
        super()._uninstall(args)
        path = config_path()
        old = read_config(path)
        new = without_ours(old, path)
        if new != old:
            saved = write_config(path, new, backup=not args.no_backup)
            print(f"removed from {path}" + (f" (backup: {saved})" if saved else ""))

    def doctor_install(self, report: Report, args: argparse.Namespace) -> bool:
        path = config_path()
        data = read_config(path)
        ours = snippet(path)["plugins"]
        found = data.get("plugins")
        plugins: dict[str, Any] = found if isinstance(found, dict) else {}
        paths = (plugins.get("load") or {}).get("paths") or []
        report.check(
            ours["load"]["paths"][0] in paths,
            f"plugins.load.paths names {LOADER} ({path})",
            "dsh-circuit-breaker install openclaw",
        )
        report.check(
            (plugins.get("entries") or {}).get(PLUGIN_ID) == ours["entries"][PLUGIN_ID],
            f"plugins.entries.{PLUGIN_ID} enabled, with conversation access",
            "dsh-circuit-breaker install openclaw",
        )
        try:
            plugins_of(data, path)
        except InstallError as exc:
            report.problem(str(exc))
        return super().doctor_install(report, args) and not report.problems

    def report_boot(self, report: Report, booted: Booted) -> None:
        """One record per load: the config check at `register` (`start: 0`; the guard it
        starts next writes its own). OpenClaw runs a staged copy of a plugin and the files
        it imports (under its state directory's `plugin-captures/`): the copy of our adapter
        counts as ours (the loader check above named this environment's)."""
        records = [
            {**r, "pluginFile": str(self.adapter)} if _staged_adapter(r.get("pluginFile")) else r
            for r in booted.records
            if r.get("start") == 0
        ]
        super().report_boot(report, Booted(records, booted.output, booted.notes))


def _staged_adapter(path: object) -> bool:
    parts = Path(path).parts if isinstance(path, str) else ()
    return parts[-2:] == ("js", "openclaw.mjs") and "plugin-captures" in parts


HARNESS = OpenClaw(
    name=NAME,
    label=LABEL,
    exempt=EXEMPT,
    annotation_args=ANNOTATION_ARGS,
    adapter=JS_DIR / "openclaw.mjs",
    executable="openclaw",
    package="openclaw",
    plugin_dir=lambda scope, args: config_path().parent,
    boot=boot,
    file_name=LOADER,
    start_timeout=180.0,
)
add_arguments, install, uninstall, doctor = HARNESS.entry_points()
