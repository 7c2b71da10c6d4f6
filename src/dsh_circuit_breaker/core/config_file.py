"""Loading the breaker's configuration from a file, for processes that start fresh for
every call (the command hook) and for the commands around them.

Where the file comes from, first match wins:
1. an explicit path (`--config FILE`);
2. `$DSH_CIRCUIT_BREAKER_CONFIG`;
3. the user config file: `$XDG_CONFIG_HOME/dsh-circuit-breaker/config.{toml,json,yaml,yml}`
   (else `~/.config/...`); if there is none, the defaults.

A file is TOML, JSON, or YAML (YAML needs PyYAML), chosen by its extension. It holds the
breaker's keys (camelCase or snake_case, validated exactly as `Config.from_mapping`),
plus optionally `state`, the state URL. A DSH-style patch row is accepted as well, alone
or in a list of rows:

    - id: circuit-breaker
      config:
        duplicateLimit: 6

An explicitly named file that is missing, unreadable or invalid is a `ConfigError`;
nothing ever falls back silently to the defaults. So is one that is not a regular file
(a FIFO would hang every call, /dev/zero eat all memory), one larger than
MAX_CONFIG_BYTES, and one holding more than MAX_VALUES values once YAML's aliases are
expanded (an alias bomb of a few hundred bytes stands for billions).
"""

from __future__ import annotations

import os
import sys

from .config import Config, ConfigError, shown
from .files import Unsafe, default_incident_log, default_state_url, read_regular, user_config_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    class Spellings(Protocol):
        """What a harness adds to SPEC's defaults (every module of `harnesses` has it:
        `harnesses/_contract.py`'s `Harness` extends this)."""

        @property
        def EXEMPT(self) -> tuple[str, ...]: ...  # its spellings of SPEC's exempt tools
        @property
        def ANNOTATION_ARGS(self) -> tuple[str, ...]: ...  # arguments it rewrites per call


ENV_CONFIG = "DSH_CIRCUIT_BREAKER_CONFIG"
ENV_STATE = "DSH_CIRCUIT_BREAKER_STATE"
ENV_TOKEN = "DSH_CIRCUIT_BREAKER_TOKEN"  # the HTTP guard's token (token.py)
ROW_IDS = ("circuit-breaker", "dsh-circuit-breaker")
EXTENSIONS = ("toml", "json", "yaml", "yml")
MAX_CONFIG_BYTES = 1024 * 1024
MAX_VALUES = 100_000


class Loaded:
    """A loaded configuration: `config`, the `state` URL the file names (if any), and
    the `path` of the file read (None when the defaults apply)."""

    __slots__ = ("config", "path", "state")

    def __init__(self, config: Config, state: str | None, path: str | None) -> None:
        self.config = config
        self.state = state
        self.path = path


def user_config_paths() -> list[str]:
    directory = user_config_dir()
    return [os.path.join(directory, f"config.{ext}") for ext in EXTENSIONS]


def find_config(explicit: str | None = None) -> str | None:
    """The config file to read, or None for the defaults (see the module docstring)."""
    if explicit:
        return explicit
    from_env = os.environ.get(ENV_CONFIG)
    if from_env:
        return from_env
    for path in user_config_paths():
        if os.path.isfile(path):
            return path
    return None


def load(path: str | None = None, *, base: Config | None = None) -> Loaded:
    """Find (see `find_config`), read and validate the configuration over `base`."""
    return load_over(path, [base])[0]


def load_over(path: str | None, bases: list[Config | None]) -> list[Loaded]:
    """The configuration over each of `bases`, from one read of the file: every harness
    of one process sees the same file, even one being edited meanwhile."""
    found = find_config(path)
    if found is None:
        return [Loaded(base or Config(), None, None) for base in bases]
    mapping = read_mapping(found)
    loaded = []
    for base in bases:
        try:
            config, state = _build(mapping, base)
        except ConfigError as exc:
            raise ConfigError(f"{found}: {exc}") from None
        loaded.append(Loaded(config, state, found))
    return loaded


def hook_config(
    config_path: str | None = None, harness: Spellings | None = None
) -> tuple[Config, str | None]:
    """The configuration of a process that runs for a harness (the command hook, and the
    commands around it), and the state URL its config file names (if any).

    Over SPEC's defaults this adds the harness's own exempt spellings and annotation
    arguments (`harness`: a module of `harnesses`), and turns the incident log on in the
    state directory, since a supervisor has no other way to see a tripped hook agent. A
    config file's own `exempt`, `ignoreArgs` or `incidentLog` replaces these.
    """
    loaded = load(config_path, base=hook_defaults(harness))
    return loaded.config, loaded.state


def hook_defaults(harness: Spellings | None = None) -> Config:
    """What `hook_config` loads the file over: the harness's defaults, the incident log on."""
    return harness_defaults(harness).replace(incident_log=default_incident_log())


def harness_defaults(harness: Spellings | None = None) -> Config:
    """SPEC's defaults plus a harness's own exempt spellings and annotation arguments
    (`harness`: a module of `harnesses`, or None for SPEC's defaults alone)."""
    from .config import DEFAULT_EXEMPT, DEFAULT_IGNORE_ARGS

    return Config(
        exempt=DEFAULT_EXEMPT + (() if harness is None else harness.EXEMPT),
        ignore_args=DEFAULT_IGNORE_ARGS + (() if harness is None else harness.ANNOTATION_ARGS),
    )


def state_url(explicit: str | None, from_file: str | None) -> str:
    """`--state`, else `$DSH_CIRCUIT_BREAKER_STATE`, else the config file's `state`,
    else the default SQLite file in the user's state directory."""
    if explicit:
        return explicit
    env = os.environ.get(ENV_STATE)
    if env:
        return env
    if from_file:
        return from_file
    return default_state_url()


def load_config(path: str | None = None, *, base: Config | None = None) -> Config:
    return load(path, base=base).config


def read_mapping(path: str) -> dict[str, Any]:
    """The breaker's mapping in a file (a patch row's `config`, if it is a patch row)."""
    try:
        raw = read_regular(os.path.expanduser(path), MAX_CONFIG_BYTES)
    except Unsafe as exc:
        raise ConfigError(f"config file not read: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    data = _parse(path, raw)
    try:
        return breaker_section(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def breaker_section(data: Any) -> dict[str, Any]:
    """The breaker's keys in a parsed file: the file itself, or a patch row's `config`."""
    if data is None:
        return {}
    rows = data if isinstance(data, list) else [data] if _is_row(data) else None
    if rows is None:
        if not isinstance(data, dict):
            raise ConfigError(f"config must be a mapping, got {type(data).__name__}")
        return data
    for row in rows:
        if _is_row(row):
            section = row.get("config")
            if section is None:
                return {}
            if not isinstance(section, dict):
                raise ConfigError(
                    f"patch row {row['id']!r}: config must be a mapping, "
                    f"got {type(section).__name__}"
                )
            return section
    raise ConfigError("no patch row with id: circuit-breaker")


def _is_row(value: Any) -> bool:
    return isinstance(value, dict) and value.get("id") in ROW_IDS


def _build(mapping: dict[str, Any], base: Config | None) -> tuple[Config, str | None]:
    values = dict(mapping)
    state = values.pop("state", None)
    if state is not None and (not isinstance(state, str) or "://" not in state):
        raise ConfigError(f"config key state: must be a state URL, got {shown(state)}")
    return Config.from_mapping(values, base=base), state


def _parse(path: str, raw: bytes) -> Any:
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    try:
        if ext == "toml":
            return _toml().loads(raw.decode("utf-8"))
        if ext in ("yaml", "yml"):
            return _counted(_yaml().safe_load(raw), path)
        import json

        return json.loads(raw)
    except ConfigError:
        raise
    except Exception as exc:  # each parser has its own error class
        kind = {"toml": "TOML", "yaml": "YAML", "yml": "YAML"}.get(ext, "JSON")
        raise ConfigError(f"{path} is not valid {kind}: {_parse_problem(exc)}") from None


def _parse_problem(exc: Exception) -> str:
    """A parser's error on one line. PyYAML's runs to several (its context, a caret,
    and `"<byte string>"` for the file): its problem and position are what matter."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def _counted(data: Any, path: str) -> Any:
    """`data`, if it holds at most MAX_VALUES values counting every alias's copy: a
    walk that stops at the limit, so it costs no more than a file without aliases."""
    stack, seen = [data], 0
    while stack:
        value = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ConfigError(f"{path} holds more than {MAX_VALUES} values (YAML aliases?)")
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return data


def _toml() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:  # Python 3.10
        import tomli  # type: ignore[import-not-found,unused-ignore]

        return tomli
    except ImportError:
        raise ConfigError("a TOML config file needs Python 3.11+ or the tomli package") from None


def _yaml() -> Any:
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]

        return yaml
    except ImportError:
        raise ConfigError(
            "a YAML config file needs PyYAML: pip install 'dsh-circuit-breaker[yaml]'"
        ) from None


def check_hook(harness: Spellings, config_path: str | None, state: str | None) -> Config:
    """Load the config and open the state store a hook will use, as it will: a typo in
    either would otherwise be installed, and every tool call after would fail open with a
    warning on a stderr nobody reads. ConfigError (or StoreUnavailable) says what is
    wrong, before anything is written. Returns the config the hook will run with."""
    from .stores import store_from_url

    config, file_state = hook_config(config_path, harness)
    store = store_from_url(state_url(state, file_state), config)
    probe = f"dsh-circuit-breaker-install-{os.getpid()}"
    try:  # a write, as the hook's first call makes (a Redis store connects only then)
        store.transact(probe, lambda state: state.calls)
        store.reset(probe)
    finally:
        store.close()
    return config
