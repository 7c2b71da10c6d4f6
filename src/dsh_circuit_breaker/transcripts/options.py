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

from ..config import Config, ConfigError
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


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="breaker config file (TOML, JSON or YAML)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key; VALUE is read as JSON when it parses "
        "(--set duplicateLimit=4 --set 'exempt=[\"TodoWrite\"]'), else as a string",
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


def load_config(path: str | None, overrides: list[str]) -> Config:
    """The config a replay uses: the file (if any), then each --set in order."""
    config = Config()
    if path:
        config = _load_file(path)
    values: dict[str, Any] = {}
    for text in overrides:
        key, value = parse_override(text)
        values[key] = value
    if values:
        config = Config.from_mapping(values, base=config)
    return config


def _load_file(path: str) -> Config:
    # The shared loader: TOML, JSON or YAML by extension, camelCase or snake_case keys, or a
    # DSH patch row; a missing or invalid file is a ConfigError naming it.
    from ..config_file import load_config as load_shared

    return load_shared(path)


def config_or_exit(args: argparse.Namespace) -> Config | None:
    try:
        return load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"dsh-circuit-breaker: {exc}", file=sys.stderr)
        return None


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


def count(n: int, word: str) -> str:
    """`1 run`, `2 runs`: for the one-line summaries."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def config_summary(config: Config) -> dict[str, Any]:
    return {
        "duplicateLimit": config.duplicate_limit,
        "window": config.window,
        "resetOnNewCall": config.reset_on_new_call,
        "maxCallsPerAgent": config.max_calls_per_agent,
    }
