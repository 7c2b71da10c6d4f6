"""What `analyze`, `replay` and `calibrate` share: check the config and the paths before any
work, read every run through the breaker, write each as it comes (a JSON row, or a table
row), then the JSON report's tail or the summary. A command says only what is its own."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

from ..core.config import Config
from ..usage import error
from .analysis import AgentRun, runs_of
from .model import Problems, Transcript, Writer
from .options import (
    ReplayConfig,
    config_or_exit,
    inputs_or_exit,
    pipe_safe,
    skipped,
    transcripts,
)
from .output import JsonReport, Table
from .sources import SUFFIXES

Column = tuple[str, int, str]


class Command:
    """One run of a transcript command over `args`, with the configs they name."""

    name: ClassVar[str]  # as the JSON report names it
    columns: ClassVar[list[Column]] = []  # the table of runs (none: no table)
    budget_column: ClassVar[Column | None] = None  # before the last, when there are budgets

    def __init__(self, args: argparse.Namespace, configs: ReplayConfig) -> None:
        self.args = args
        self.configs = configs
        self.config = configs.default
        self.show_args: bool = args.show_args
        self.keep_timeline = False
        self.track_results = False  # whether a loop's results moved (calibrate)

    def ready(self) -> bool:
        """Whatever else must hold before the work (a file it will write)."""
        return True

    @property
    def log(self) -> Writer:
        """Where the problems met are listed."""
        return sys.stderr

    def head(self) -> dict[str, Any]:
        return {"config": self.config.to_mapping()}

    def configs_for(self, fmt: str) -> Sequence[Config]:
        return [self.configs.of(fmt)]

    def add(self, run: AgentRun) -> Any:
        """Count one run; what to write of it (None: nothing)."""
        raise NotImplementedError

    def json_row(self, row: Any) -> dict[str, Any]:
        return dict(row)

    def cells(self, row: Any) -> list[str]:
        raise NotImplementedError

    def done(self) -> None:
        """Every run read (or the reading failed)."""

    def finish(self) -> int:
        """After the runs, before the tail or the summary: the exit status."""
        return 0

    def tail(self) -> dict[str, Any]:
        raise NotImplementedError

    def summary(self, problems: Problems) -> None:
        raise NotImplementedError

    def table_columns(self) -> list[Column]:
        budget = self.budget_column
        if budget is None or not self.configs.budgets:
            return self.columns
        return [*self.columns[:-1], budget, self.columns[-1]]


def runner(command: type[Command]) -> Callable[[argparse.Namespace], int]:
    """The `run(args)` of a subcommand: exit 2 for a bad config, a missing path, what
    `ready` refuses or paths that held no transcript, else the command's status."""

    @pipe_safe
    def run(args: argparse.Namespace) -> int:
        configs = config_or_exit(args)
        if configs is None or not inputs_or_exit(args):
            return 2
        this = command(args, configs)
        if not this.ready():
            return 2
        problems = Problems(stream=this.log)
        out = sys.stdout
        report = JsonReport(out, this.name, this.head()) if args.json else None
        columns = this.table_columns()
        table = Table(out, columns) if report is None and columns else None
        read = _Counted(transcripts(args, problems))
        runs = runs_of(
            read,
            this.configs_for,
            stats_config=this.config,
            show_args=this.show_args,
            keep_timeline=this.keep_timeline,
            track_results=this.track_results,
        )
        try:
            for agent_run in runs:
                row = this.add(agent_run)
                if row is None:
                    continue
                if report is not None:
                    report.run(this.json_row(row))
                elif table is not None:
                    table.row(this.cells(row))
        finally:
            this.done()
        status = this.finish()
        if report is not None:
            report.close({**this.tail(), "problems": problems.to_json()})
        else:
            this.summary(problems)
        if not read.count:
            return _nothing_read(this.name, args.paths, problems)
        return status

    return run


class _Counted:
    """The transcripts, counted as they are read."""

    def __init__(self, items: Iterator[Transcript]) -> None:
        self.items = items
        self.count = 0

    def __iter__(self) -> Iterator[Transcript]:
        for item in self.items:
            self.count += 1
            yield item


def _nothing_read(name: str, paths: list[str], problems: Problems) -> int:
    """Exit 2 when no file was a transcript: a report of 0 runs would read as "no loops"."""
    where = ", ".join(paths)
    if problems.count:
        why = f"{skipped(problems.count)}, none recognized"
    else:
        why = f"no {', '.join(SUFFIXES)} file found"
    hints = "".join(f"; {note.removeprefix('note: ')}" for note in sorted(problems.notes))
    return error(f"{name}: no transcript read from {where} ({why}){hints}")
