"""Issue 25's gate: the result-aware rule against today's default, on the peer suites and on
the calibration corpus.

    .venv/bin/python bench/result_gate.py [--limits 6,8,10,12,16] [--no-corpus] [--no-suites]
        [--config NAME=KEY=VALUE,...]...

Configs, each on top of the replay's usual base (the harness's installed defaults, no
config file): `default` (today's), `progress` (`resultProgress: true`), `progress+sN`
(`resultProgress: true`, `sameResultLimit: N`) for each N of --limits, and each --config
(e.g. `cycle2=cycleRounds=2`). A config whose keys
this build does not know is reported and left out, so the script runs before the engine
has them.

(a) Peer suites (written by bench/peer_suites/build.py into a temporary directory, 9 MB
not kept in the repository): every scenario through every
config. False positive: a `healthy` scenario with a call denied (a stop is a denial too).
Cap-only miss: a `loop` scenario with no denial but the 300-call cap's. `warn` scenarios
are shown apart.

(b) The corpus (../shared/corpus, read in place): a run loops when one identical call runs
--loop-streak times back to back (calibrate's definition, default 8); every other run is
healthy. Per config: healthy runs denied and stopped (and how many of those today's default
does not deny or stop), loops stopped within the streak, and how many calls into the loop
(against today's default: loops stopped later or no longer stopped).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

from dsh_circuit_breaker.core.config import ConfigError  # noqa: E402
from dsh_circuit_breaker.transcripts.analysis import AgentRun, Denials, runs_of  # noqa: E402
from dsh_circuit_breaker.transcripts.model import Problems, Transcript  # noqa: E402
from dsh_circuit_breaker.transcripts.options import ReplayConfig  # noqa: E402
from dsh_circuit_breaker.transcripts.readers import read_transcripts  # noqa: E402
from dsh_circuit_breaker.transcripts.sources import walk  # noqa: E402

SUITES = os.path.join(HERE, "peer_suites")  # build.py; the files it writes are not kept
CORPUS = os.path.join(ROOT, "..", "shared", "corpus")


def configs(limits: list[int], named: list[str]) -> list[tuple[str, ReplayConfig]]:
    wanted: list[tuple[str, list[str]]] = [("default", []), ("progress", ["resultProgress=true"])]
    wanted += [(f"progress+s{n}", ["resultProgress=true", f"sameResultLimit={n}"]) for n in limits]
    for text in named:  # NAME=key=value,key=value
        name, _, overrides = text.partition("=")
        wanted.append((name, [o for o in overrides.split(",") if o]))
    built = []
    for name, overrides in wanted:
        try:
            built.append((name, ReplayConfig(None, overrides)))
        except ConfigError as exc:
            print(f"config {name}: left out ({exc})", file=sys.stderr)
    return built


def replay(
    paths: list[str], built: list[tuple[str, ReplayConfig]], problems: Problems
) -> Iterator[AgentRun]:
    transcripts: Iterator[Transcript] = read_transcripts(walk(paths, problems), problems, None)
    return runs_of(transcripts, lambda fmt: [rc.of(fmt) for _, rc in built])


def caught(track: Denials) -> int | None:
    """The first call denied by anything but the cap (None: only the cap, or nothing). The
    cap is for life: once it denies, every later denial is the cap's too."""
    first = track.first
    return None if first is None or first["kind"] == "cap" else int(first["call"])


# ---------------------------------------------------------------- peer suites


@dataclass
class SuiteRow:
    scenarios: int = 0
    healthy: int = 0
    loops: int = 0
    warns: int = 0
    false_positives: list[list[str]] = field(default_factory=list)  # per config: task ids
    cap_only: list[list[str]] = field(default_factory=list)
    warn_denied: list[int] = field(default_factory=list)
    caught_at: list[dict[str, int]] = field(default_factory=list)  # per config: loop -> call


def expectations(path: str) -> dict[str, dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return {str(r["task_id"]): r["info"] for r in json.load(fh)}


def peer_suites(built: list[tuple[str, ReplayConfig]]) -> dict[str, SuiteRow]:
    import tempfile

    sys.path.insert(0, SUITES)
    import build  # bench/peer_suites/build.py

    with tempfile.TemporaryDirectory() as out:
        return _peer_suites(built, sorted(build.build(out)))


def _peer_suites(built: list[tuple[str, ReplayConfig]], paths: list[str]) -> dict[str, SuiteRow]:
    rows: dict[str, SuiteRow] = {}
    problems = Problems()
    for path in paths:
        name = os.path.basename(path)
        infos = expectations(path)
        row = rows[name[: -len(".json")]] = SuiteRow()
        row.false_positives = [[] for _ in built]
        row.cap_only = [[] for _ in built]
        row.warn_denied = [0 for _ in built]
        row.caught_at = [{} for _ in built]
        for run in replay([path], built, problems):
            task = str(run.transcript.meta["task_id"])
            expect = infos[task]["expect"]
            row.scenarios += 1
            row.healthy += expect == "healthy"
            row.loops += expect == "loop"
            row.warns += expect == "warn"
            for i, track in enumerate(run.tracks):
                denied = track.first is not None
                if expect == "healthy" and denied:
                    kind = track.first["kind"] if track.first else "?"
                    row.false_positives[i].append(f"{task} ({kind}) {infos[task]['test']}")
                elif expect == "loop" and caught(track) is None:
                    row.cap_only[i].append(f"{task} {infos[task]['test']}")
                elif expect == "loop":
                    row.caught_at[i][task] = caught(track) or 0
                elif expect == "warn" and denied:
                    row.warn_denied[i] += 1
    return rows


def _line(suite: str, row: SuiteRow, mark: str = "") -> str:
    pairs = zip(row.false_positives, row.cap_only, strict=True)
    cells = [f"{mark}{len(fp)} / {len(co)}{mark}" for fp, co in pairs]
    shape = f"{row.scenarios} ({row.healthy}, {row.loops}, {row.warns})"
    return f"| {suite} | {shape} | " + " | ".join(cells) + " |"


def print_suites(rows: dict[str, SuiteRow], built: list[tuple[str, ReplayConfig]]) -> None:
    names = [n for n, _ in built]
    print("## Peer suites: false positives / cap-only misses")
    print()
    print("| suite | scenarios (healthy, loop, warn) | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    total = SuiteRow(false_positives=[[] for _ in built], cap_only=[[] for _ in built])
    for suite, row in rows.items():
        print(_line(suite, row))
        total.scenarios += row.scenarios
        total.healthy += row.healthy
        total.loops += row.loops
        total.warns += row.warns
        for i in range(len(built)):
            total.false_positives[i] += row.false_positives[i]
            total.cap_only[i] += row.cap_only[i]
    print(_line("all", total, "**"))
    print()
    for i, name in enumerate(names):
        print(f"- {name}: false positives:")
        print("".join(f"  - {text}\n" for text in total.false_positives[i]) or "  none")
        print(f"- {name}: cap-only misses:")
        print("".join(f"  - {text}\n" for text in total.cap_only[i]) or "  none")
    for i, name in enumerate(names[1:], start=1):
        new = [
            f"{task} at call {at}"
            for r in rows.values()
            for task, at in r.caught_at[i].items()
            if task not in r.caught_at[0]
        ]
        listed = ", ".join(new) or "none"
        print(f"- {name}: loops stopped that today's default leaves to the cap: {listed}")
    warn = [sum(r.warn_denied[i] for r in rows.values()) for i in range(len(built))]
    print(f"- warn scenarios denied, per config: {dict(zip(names, warn, strict=True))}")
    print()


# ---------------------------------------------------------------- corpus


@dataclass
class CorpusRow:
    healthy: int = 0
    loops: int = 0
    denied: set[str] = field(default_factory=set)
    stopped: set[str] = field(default_factory=set)
    into_loop: dict[str, int] = field(default_factory=dict)  # run -> calls into the loop


def corpus(built: list[tuple[str, ReplayConfig]], paths: list[str], streak: int) -> list[CorpusRow]:
    rows = [CorpusRow() for _ in built]
    problems = Problems()
    for run in replay(paths, built, problems):
        label = f"{run.transcript.label} [{run.agent}]"
        loop = run.loop(streak)
        for row, track in zip(rows, run.tracks, strict=True):
            if loop is None:
                row.healthy += 1
                if track.first is not None:
                    row.denied.add(label)
                if track.stop is not None:
                    row.stopped.add(label)
                continue
            row.loops += 1
            at = track.first_in(*loop)
            if at is not None:
                row.into_loop[label] = at - loop[0] + 1
    if problems.count:
        print(f"({problems.count} unreadable lines or files skipped)", file=sys.stderr)
    return rows


def print_corpus(rows: list[CorpusRow], built: list[tuple[str, ReplayConfig]]) -> None:
    base = rows[0]
    print(f"## Corpus: {rows[0].healthy} healthy runs, {rows[0].loops} loops")
    print()
    print(
        "| config | healthy denied (new) | healthy stopped (new) | loops stopped | "
        "calls into the loop: median / max | loops later or lost |"
    )
    print("|---|---|---|---|---|---|")
    for (name, _), row in zip(built, rows, strict=True):
        into = list(row.into_loop.values())
        spread = f"{statistics.median(into):g} / {max(into)}" if into else "-"
        worse = [
            run
            for run, n in base.into_loop.items()
            if run not in row.into_loop or row.into_loop[run] > n
        ]
        print(
            f"| {name} | {len(row.denied)} ({len(row.denied - base.denied)}) | "
            f"{len(row.stopped)} ({len(row.stopped - base.stopped)}) | "
            f"{len(row.into_loop)} of {row.loops} | {spread} | {len(worse)} |"
        )
    print()
    for (name, _), row in zip(built, rows, strict=True):
        new = sorted(row.denied - base.denied)
        if new:
            print(f"- {name}: healthy runs denied that today's default allows: {', '.join(new)}")
        lost = sorted(set(base.into_loop) - set(row.into_loop))
        if lost:
            print(f"- {name}: loops today's default stops that it does not: {', '.join(lost)}")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limits", default="6,8,10,12,16", help="sameResultLimit values")
    parser.add_argument("--corpus", default=CORPUS, help="the calibration corpus directory")
    parser.add_argument("--loop-streak", type=int, default=8, help="as calibrate's")
    parser.add_argument("--no-corpus", action="store_true")
    parser.add_argument("--no-suites", action="store_true")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=KEY=VALUE,...",
        help="one more config, e.g. calls-only=resultProgress=false,cycleRounds=0 (repeatable)",
    )
    args = parser.parse_args()
    limits = [int(n) for n in args.limits.split(",") if n.strip()]
    built = configs(limits, args.config)
    print("configs: " + ", ".join(name for name, _ in built))
    print()
    if not args.no_suites:
        print_suites(peer_suites(built), built)
    if not args.no_corpus:
        print_corpus(corpus(built, [args.corpus], args.loop_streak), built)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
