"""Command-line options the transcript commands share, and loading the replay config."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from .. import harnesses
from ..core.config import Config, ConfigError
from ..core.config_file import harness_defaults
from ..core.config_file import load_config as load_shared
from ..core.display import plural
from ..usage import error
from .model import Problems, Transcript
from .readers import FORMATS, read_transcripts
from .sources import walk


def pipe_safe(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`... | head` closing the pipe early ends the command quietly, not with a traceback."""

    @functools.wraps(run)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the exit-time flush does not fail too
            return 1

    return wrapper


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="transcript files or directories (searched recursively)",
    )
    parser.add_argument(
        "--format",
        choices=["auto", *FORMATS],
        default="auto",
        help="read every file as this format instead of detecting it",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--show-args",
        action="store_true",
        help="name calls with a short preview of their arguments (default: argument names "
        "and a digest only, so no argument content is copied into the report)",
    )


def refuse_option(parser: argparse.ArgumentParser, option: str, owner: str) -> None:
    """Accept `option` only to say which command has it, rather than argparse's
    'unrecognized arguments' under the top-level usage."""

    class Refuse(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
            parser.error(
                f"{option} belongs to {owner}: dsh-circuit-breaker {owner} PATH... {option} OUT"
            )

    parser.add_argument(option, action=Refuse, nargs="?", help=argparse.SUPPRESS)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="breaker config file (TOML, JSON or YAML)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key; VALUE is read as JSON when it parses "
        "(--set duplicateLimit=4 --set 'exempt=[\"TodoWrite\"]'), else as a string; "
        "--set toolLimits.PATTERN=N sets one budget (--set toolLimits.web_search=12)",
    )


def parse_override(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def harness_of(fmt: str | None) -> str | None:
    """The harness (harnesses.HARNESSES) whose installed breaker a replay of format `fmt`
    stands for (the format's HARNESS); None: SPEC's defaults."""
    return None if fmt is None else FORMATS[fmt].HARNESS


def harness_base(fmt: str | None) -> Config:
    """The config the breaker installed in the harness that writes transcripts of format
    `fmt` starts from, before any config file (the Claude Code hook: its exempt spellings
    such as `TodoWrite` added to SPEC's)."""
    name = harness_of(fmt)
    return harness_defaults(None if name is None else harnesses.load(name))


class ReplayConfig:
    """The config a replay uses for a transcript: its harness's base (`harness_base`), then
    the file (if any), then each --set in order, as the installed breaker would have read
    them. The incident log is off: a replay must not report past runs as incidents.

    Every format's config is built at once, so a bad file or --set fails before any work.
    """

    def __init__(self, path: str | None, overrides: list[str]) -> None:
        values = [parse_override(text) for text in overrides]
        built: dict[str | None, Config] = {}
        self._by_format: dict[str | None, Config] = {}
        for fmt in (None, *FORMATS):
            harness = harness_of(fmt)
            if harness not in built:
                built[harness] = _build(harness_base(fmt), path, values)
            self._by_format[fmt] = built[harness]
        self.default = self._by_format[None]

    def of(self, fmt: str) -> Config:
        return self._by_format.get(fmt, self.default)

    @property
    def budgets(self) -> bool:
        """Whether any format's config has toolLimits (a report then shows budgets)."""
        return any(config.tool_limits for config in self._by_format.values())


def _build(base: Config, path: str | None, overrides: list[tuple[str, Any]]) -> Config:
    config = _load_file(path, base) if path else base
    if overrides:
        try:
            config = Config.from_mapping(_merged(overrides, config), base=config)
        except ConfigError as exc:
            raise ConfigError(f"--set: {exc}") from None
    return config.replace(incident_log=None)


BUDGETS = "toolLimits"


def _merged(overrides: list[tuple[str, Any]], config: Config) -> dict[str, Any]:
    """The --set values, a later one winning. `toolLimits.PATTERN=N` sets one entry of
    toolLimits, kept beside the entries the file or an earlier --set gave; the whole
    mapping is validated with the rest, so a bad limit names the key as any other."""
    values: dict[str, Any] = {}
    for key, value in overrides:
        head, dot, pattern = key.partition(".")
        if not dot or head not in (BUDGETS, "tool_limits"):
            values[key] = value
            continue
        if not pattern:
            raise ConfigError(f"--set {key}=...: expected {BUDGETS}.PATTERN=N")
        head = "tool_limits" if "tool_limits" in values else BUDGETS  # either spelling
        limits = values.get(head, config.tool_limits)
        values[head] = {**limits, pattern: value} if isinstance(limits, dict) else limits
    return values


def _load_file(path: str, base: Config) -> Config:
    # The shared loader: TOML, JSON or YAML by extension, camelCase or snake_case keys, or a
    # DSH patch row; a missing or invalid file is a ConfigError naming it.

    return load_shared(path, base=base)


def config_or_exit(args: argparse.Namespace) -> ReplayConfig | None:
    try:
        return ReplayConfig(args.config, args.overrides)
    except ConfigError as exc:
        error(exc)
        return None


def inputs_or_exit(args: argparse.Namespace) -> bool:
    """Whether every PATH exists: a mistyped path ends the command before any work, rather
    than in a report of 0 runs."""
    wrong = []
    for path in args.paths:
        if not os.path.exists(path):
            wrong.append(f"{path}: no such file or directory")
        elif not (os.path.isdir(path) or os.path.isfile(path)):  # a FIFO would block
            wrong.append(f"{path}: not a regular file or a directory")
    for problem in wrong:
        error(problem)
    return not wrong


def transcripts(args: argparse.Namespace, problems: Problems) -> Iterator[Transcript]:
    fmt = None if args.format == "auto" else args.format
    return read_transcripts(walk(args.paths, problems), problems, fmt)


def iso(when: float | None) -> str | None:
    if when is None:
        return None
    moment = datetime.fromtimestamp(when, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f}s"
    if value < 3600:
        return f"{value / 60:.1f}m"
    return f"{value / 3600:.1f}h"


def skipped(n: int) -> str:
    """The summaries' last line: what `Problems` counted."""
    return f"{plural(n, 'unreadable line or file', 'unreadable lines or files')} skipped"


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def config_summary(config: Config) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "duplicateLimit": config.duplicate_limit,
        "window": config.window,
        "resetOnNewCall": config.reset_on_new_call,
        "maxCallsPerAgent": config.max_calls_per_agent,
        "stopAfterDenials": config.stop_after_denials,
    }
    summary["resultProgress"] = config.result_progress
    summary["sameResultLimit"] = config.same_result_limit
    summary["cycleRounds"] = config.cycle_rounds
    summary[BUDGETS] = dict(config.tool_limits)
    return summary


def config_text(config: Config) -> str:
    """`duplicateLimit=6, ..., toolLimits.web_search=12`: the summary as --set would take it."""
    parts = []
    for key, value in config_summary(config).items():
        if isinstance(value, dict):
            parts.append(budgets_text(config) if value else "")
        else:
            parts.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    return ", ".join(part for part in parts if part)


def budgets_text(config: Config) -> str:
    """`toolLimits.web_search=12, toolLimits.mcp__*=50`, or `-` without budgets."""
    limits = config.tool_limits
    return ", ".join(f"{BUDGETS}.{p}={n}" for p, n in limits.items()) or "-"


def stop_text(config: Config, totals: dict[str, Any]) -> str:
    """The summaries' line on stops and budgets, from `StopTotals.to_json()`."""
    after = config.stop_after_denials
    text = "stopAfterDenials=0: no run is stopped."
    if after:
        runs, saved = totals["runs_stopped"], totals["stop_time_saved_s"]
        text = (
            f"A stop after {plural(after, 'refusal')} in a row (stopAfterDenials={after}) "
            f"would have ended {plural(runs, 'run')}, saving the "
            f"{plural(totals['stop_calls_saved'], 'call')} made after it"
            f"{time_text(saved) if runs else ''}."
        )
    if config.tool_limits:
        text += (
            f" Budgets ({budgets_text(config)}) would have refused a call in "
            f"{plural(totals['runs_with_budget_denial'], 'run')}."
        )
    return text


def time_text(value: float | None) -> str:
    """How a summary ends a figure of time saved."""
    return " (no timestamps to measure time)" if value is None else f" and {seconds(value)}"
