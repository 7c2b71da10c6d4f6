"""The docs run as written, and quote the denial texts literally.

Every fenced block in README.md and docs/*.md (found by `doc_blocks`, so a block added
tomorrow is covered too) is checked by its language:

- `python`: run as a script; `sh`/`bash`/`shell`: a page's blocks run in order in one
  `bash -e -o pipefail`, as a reader types them. Both in a scratch directory with a scratch
  HOME (see `scratch`), no network beyond 127.0.0.1.
- `json`, `toml`, `yaml`: parsed.
- a `text` block that begins `$ dsh-circuit-breaker ...`: each command runs in a scratch
  directory holding a copy of the repository files it names (a fresh clone, as far as it
  can tell) and prints what the block shows, a line `...` standing for lines left out.
- a block marked `<!-- excerpt: examples/X.py -->` is part of that program: the program
  exists and holds each of the block's lines (tests/test_examples.py runs it);
- a block marked `<!-- not-run: reason -->` is shown only, for the reason given.

Install lines install from a clone (`pip install .`, `pip install '.[extra]'`) while the
package is not published, with the published form beside them, labelled as such.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require
from doc_blocks import DOCS, ROOT, Block, MarkerError, all_blocks, blocks
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from sandbox import DEAD, scratch_env

try:
    import yaml
except ImportError:  # pragma: no cover - only without the extra
    yaml = None

# How a quoted text begins: a refusal (its first words carry the meaning), or a stop.
START = re.compile(r"Circuit breaker: (?:NOT run|this agent)")
RUN = {"python": "python", "sh": "bash", "bash": "bash", "shell": "bash"}
PARSE = {"json", "toml", "yaml", "yml"}
SHOWN = {"text", "console"}  # literal output, never run
BLOCKS = all_blocks()
TIMEOUT = 50  # seconds for one block: under the suite's per-test timeout, to name the block
# A Claude Code session as Claude Code keeps it, for the transcript commands' examples.
SESSION = ROOT / "tests/fixtures/transcripts/claude-code/cbprobe4-hook-denials.jsonl"
SESSION_ID = "9368cae3-05d1-4c33-9f8d-776fe30ebaa1"


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{(?:tool|count|limit|kind|calls)\}", template)
    # A tool's name may hold dots (Mistral Vibe's `file_system.bash`).
    return re.compile(r"\S+".join(re.escape(p) for p in parts))


PATTERNS = {kind: _pattern(text) for kind, text in DEFAULT_MESSAGES.items()}


def quoted_denials(path: Path) -> list[str]:
    # Blockquotes wrap the text over lines: drop the markers, then collapse whitespace.
    text = re.sub(r"(?m)^\s*>\s?", "", path.read_text(encoding="utf-8"))
    text = " ".join(text.split())
    return [text[m.start() :] for m in START.finditer(text)]


def select(*, langs: set[str], marker: str | None) -> list[Block]:
    return [b for b in BLOCKS if b.lang in langs and b.marker == marker]


def ids(blocks: list[Block]) -> list[str]:
    return [b.id for b in blocks]


# -- the denial texts ----------------------------------------------------------------


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_every_quoted_denial_is_a_default_text(path: Path) -> None:
    for quoted in quoted_denials(path):
        matched = [kind for kind, p in PATTERNS.items() if p.match(quoted)]
        assert matched, f"{path.name} quotes a denial text the code does not send:\n{quoted[:300]}"


def test_readme_and_every_integration_doc_show_both_texts() -> None:
    for path in DOCS:
        if path.name in ("transcripts.md", "results.md", "observability.md"):
            # Not an integration: replay reports denials, results.md is a setting, and
            # observability.md what an operator watches.
            continue
        kinds = {k for q in quoted_denials(path) for k, p in PATTERNS.items() if p.match(q)}
        assert {"duplicate", "cap"} <= kinds, f"{path.name} lacks a literal denial text"


def test_pattern_rejects_a_changed_text() -> None:
    changed = DEFAULT_MESSAGES["duplicate"].replace("a repeat", "repeated")
    assert not PATTERNS["duplicate"].match(changed.format(tool="t", count=1, limit=2, kind="x"))


# -- every block is accounted for -----------------------------------------------------


def test_every_block_names_a_known_language() -> None:
    known = set(RUN) | PARSE | SHOWN
    unknown = [f"{b.id} ({b.lang or 'no language'})" for b in BLOCKS if b.lang not in known]
    assert not unknown, f"blocks in a language this test cannot check: {unknown}"


def test_markers_sit_on_blocks_they_apply_to() -> None:
    for block in BLOCKS:
        if block.marker == "excerpt":
            assert block.lang == "python", f"{block.id}: only Python blocks are excerpts"
        if block.marker is not None:
            assert block.lang in RUN, f"{block.id}: a {block.lang} block is never run"
        if block.marker == "not-run":
            assert len(block.arg.split()) >= 3, f"{block.id}: say why it is not run"


# -- running the blocks ---------------------------------------------------------------


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working directory standing for a clone after the install (`.venv` there is the
    environment the tests run in) and a HOME of its own (`sandbox`), holding one Claude
    Code session under ~/.claude/projects for the transcript commands."""
    home, work = tmp_path / "home", tmp_path / "work"
    project = home / ".claude" / "projects" / "-work-demo"
    project.mkdir(parents=True)
    shutil.copyfile(SESSION, project / f"{SESSION_ID}.jsonl")
    work.mkdir()
    (work / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    path = [str(Path(sys.executable).parent), str(ROOT / "tests/e2e/node_modules/.bin")]
    # The agent CLIs from PyPI, each in its venv (scripts/setup), for `doctor NAME`.
    path += [str(p) for p in sorted((ROOT / ".installed").glob("agent-*/bin"))]
    path.append(os.environ.get("PATH", os.defpath))
    # Offline: a package manager's registry request goes to a closed port on loopback, and
    # LiteLLM (OpenHands, DSPy) reads its bundled cost map instead of fetching one.
    return work, scratch_env(
        home,
        PATH=os.pathsep.join(path),
        npm_config_registry=DEAD + "/",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )


def budget(blocks: list[Block]) -> int:
    return TIMEOUT * len(blocks)


def run(blocks: list[Block], work: Path, env: dict[str, str]) -> None:
    """Run Python blocks one by one; shell blocks one after the other in one shell, as a
    reader types a page's commands into one terminal (an `export` or `cd` carries on)."""
    where = blocks[0].id
    if blocks[0].lang == "python":
        (work / "block.py").write_text(blocks[0].text, encoding="utf-8")
        command = [sys.executable, "block.py"]
    else:
        steps = [f"echo '>>> {b.id}' >&2\n{b.text}" for b in blocks]
        (work / "blocks.sh").write_text("\n".join(steps), encoding="utf-8")
        command = ["bash", "-e", "-o", "pipefail", "blocks.sh"]
    try:
        done = subprocess.run(
            command, cwd=work, env=env, capture_output=True, text=True, timeout=budget(blocks)
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{where}... did not finish in time:\n{exc.stdout!r}\n{exc.stderr!r}")
    if blocks[0].lang != "python":
        where = re.findall(r"(?m)^>>> (\S+)$", done.stderr)[-1]
    assert done.returncode == 0, (
        f"{where} exited {done.returncode}:\n"
        f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )


PYTHON = select(langs={"python"}, marker=None)
SHELL = select(langs=set(RUN) - {"python"}, marker=None)
# One test per page; the suite's per-test timeout stretched to that page's budget.
PAGES = [
    pytest.param(page, marks=pytest.mark.timeout(budget(blocks) + 10), id=page.name)
    for page, blocks in ((p, [b for b in SHELL if b.path == p]) for p in DOCS)
    if blocks
]


# Pages whose framework installs only in a side venv (pyproject.toml's side-NAME extras):
# their blocks run there, by scripts/test (conftest.py's `side` marker).
SIDE_PAGES = {
    "crewai.md": "crewai",
    "llamaindex.md": "llamaindex",
    "semantic-kernel.md": "semantic-kernel",
    "openhands.md": "openhands",
}
PYTHON_RUN = [
    pytest.param(
        b,
        marks=[pytest.mark.side(SIDE_PAGES[b.path.name])] if b.path.name in SIDE_PAGES else [],
        id=b.id,
    )
    for b in PYTHON
]


@pytest.mark.parametrize("block", PYTHON_RUN)
def test_python_block_runs(block: Block, scratch: tuple[Path, dict[str, str]]) -> None:
    run([block], *scratch)


@pytest.mark.parametrize("page", PAGES)
def test_shell_blocks_run_in_order(page: Path, scratch: tuple[Path, dict[str, str]]) -> None:
    run([b for b in SHELL if b.path == page], *scratch)


def test_the_python_runner_fails_a_broken_block(scratch: tuple[Path, dict[str, str]]) -> None:
    broken = Block(ROOT / "README.md", 1, "python", "return 1\n")
    with pytest.raises(AssertionError, match=re.escape("README.md:1 exited 1")):
        run([broken], *scratch)


def test_the_shell_runner_names_the_block_that_failed(
    scratch: tuple[Path, dict[str, str]],
) -> None:
    page = ROOT / "README.md"
    good, bad = Block(page, 1, "sh", "cd /\n"), Block(page, 5, "sh", "false | cat\ntrue\n")
    with pytest.raises(AssertionError, match=re.escape("README.md:5 exited 1")):
        run([good, bad, good], *scratch)


# -- shown output ---------------------------------------------------------------------

# Output blocks that begin with a command (`$ dsh-circuit-breaker ...`): what it prints.
SHOWN_RUNS = [b for b in BLOCKS if b.lang in SHOWN and b.text.startswith("$ ")]


def sessions(block: Block) -> list[tuple[str, list[str]]]:
    """Each `$ command` of a shown block, with the lines shown as its output."""
    found: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            found.append((line[2:], []))
        else:
            found[-1][1].append(line)
    return found


def shows(expected: list[str], printed: list[str]) -> bool:
    """`printed` is what `expected` shows, a line `...` standing for any lines left out."""
    if not expected:
        return not printed
    if expected[0] == "...":
        return any(shows(expected[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and printed[0] == expected[0] and shows(expected[1:], printed[1:])


def a_clone(words: list[str], clone: Path) -> None:
    """The files a command names, from this repository, at the same place in `clone`: a
    fresh clone as far as the command can tell (a path outside the repository, such as
    ../shared, is not there)."""
    for word in words:
        source = ROOT / word
        if word.startswith("-") or not source.exists():
            continue
        if not source.resolve().is_relative_to(ROOT):
            continue
        target = clone / word
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)


@pytest.mark.parametrize("block", SHOWN_RUNS, ids=ids(SHOWN_RUNS))
def test_a_shown_command_runs_in_a_clone_and_prints_what_is_shown(
    block: Block, scratch: tuple[Path, dict[str, str]]
) -> None:
    work, env = scratch
    clone = work / "clone"
    clone.mkdir()
    for command, expected in sessions(block):
        words = shlex.split(command)
        assert words[0] == PACKAGE, f"{block.id}: shows {words[0]}, not this package's command"
        a_clone(words[1:], clone)
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, (
            f"{block.id}: `{command}` exited {done.returncode}: {done.stderr}"
        )
        printed = done.stdout.rstrip("\n").splitlines()
        assert shows(expected, printed), (
            f"{block.id}: `{command}` printed\n{done.stdout}\nwhere the doc shows\n"
            + "\n".join(expected)
        )


def test_shown_output_may_leave_lines_out_only_where_it_says_so() -> None:
    assert shows(["a", "...", "d"], ["a", "b", "c", "d"]) and shows(["..."], [])
    assert not shows(["a", "d"], ["a", "b", "d"]) and not shows(["a", "...", "d"], ["a", "b"])


# -- excerpts -------------------------------------------------------------------------

EXCERPTS = select(langs={"python"}, marker="excerpt")


def imports(tree: ast.Module) -> set[tuple[str, str]]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found |= {(node.module or "", alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {(alias.name, "") for alias in node.names}
    return found


def code_lines(text: str, tree: ast.Module) -> list[str]:
    """The lines other than imports, without trailing comments; lines holding a
    placeholder (`...`) are left out, since the excerpt abbreviates there."""
    skip = {
        n
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    lines = text.splitlines()
    code = (
        re.sub(r"\s+#\s.*$", "", lines[n - 1]).strip()
        for n in range(1, len(lines) + 1)
        if n not in skip
    )
    return [line for line in code if line and not line.startswith("#") and "..." not in line]


@pytest.mark.parametrize("block", EXCERPTS, ids=ids(EXCERPTS))
def test_an_excerpt_is_part_of_a_program_in_examples(block: Block) -> None:
    """What it imports, the program imports; its other lines are lines of the program."""
    program = ROOT / block.arg
    assert program.parent == ROOT / "examples" and program.suffix == ".py", (
        f"{block.id}: an excerpt names a program in examples/, not {block.arg!r}"
    )
    assert program.is_file(), f"{block.id}: {block.arg} does not exist"
    source = program.read_text(encoding="utf-8")
    whole, part = ast.parse(source), ast.parse(block.text)
    assert imports(part) <= imports(whole), f"{block.id}: imports {block.arg} lacks"
    have = set(code_lines(source, whole))
    missing = [line for line in code_lines(block.text, part) if line not in have]
    assert not missing, f"{block.id}: lines not in {block.arg}: {missing}"


# -- data blocks ----------------------------------------------------------------------

DATA = select(langs=PARSE, marker=None)


@pytest.mark.parametrize("block", DATA, ids=ids(DATA))
def test_data_block_parses(block: Block) -> None:
    if block.lang == "json":
        json.loads(block.text)
    elif block.lang == "toml":
        pytest.importorskip("tomllib").loads(block.text)
    else:
        require(yaml is not None, "PyYAML (extra [yaml])")
        yaml.safe_load(block.text)


# -- install lines --------------------------------------------------------------------

PACKAGE = "dsh-circuit-breaker"
_CLONE = re.compile(r"^\.(?:\[(?P<extras>[\w,-]+)\])?$")


def extras() -> set[str]:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == PACKAGE
    return set(project["optional-dependencies"])


def targets(args: str) -> list[str]:
    """What a `pip install` names: the clone (`.`, `.[x]`) or this package (by name)."""
    words = shlex.split(args) if args.count("'") % 2 == 0 else args.split()
    words = [w.rstrip(",;") for w in words]
    return [w for w in words if _CLONE.match(w) or w.split("[")[0] == PACKAGE]


def pip_installs(text: str) -> list[tuple[str, str]]:
    """(arguments, text before) of each `pip install` in `text`."""
    pieces = text.split("pip install")
    found = []
    for i in range(1, len(pieces)):
        args = re.split(r"[`#\n]", pieces[i])[0]
        found.append((args, "pip install".join(pieces[:i])))
    return found


def installs(path: Path) -> list[tuple[str, str, str, str]]:
    """Each `pip install` in a doc: (where, kind, target, text before it), kind being
    "command" (a line of a shell block), "comment" (after `#` there) or "prose" (an inline
    code span). Output blocks (`text`) are quoted program output, not left out."""
    found = []
    text = path.read_text(encoding="utf-8")
    for block in (b for b in BLOCKS if b.path == path and b.lang in RUN):
        for number, line in enumerate(block.text.splitlines()):
            code, _, comment = line.partition("#")
            where = f"{block.id}+{number + 1}"
            for kind, part in (("command", code), ("comment", comment)):
                for args, before in pip_installs(part):
                    found += [(where, kind, t, before) for t in targets(args)]
    prose = re.sub(r"(?ms)^[ \t]*(```|~~~).*?^[ \t]*\1[ \t]*$", "", text)
    prose = " ".join(prose.split())
    for m in re.finditer(r"`pip install ([^`]+)`", prose):
        before = prose[max(0, m.start() - 120) : m.start()]
        found += [(path.name, "prose", t, before) for t in targets(m[1])]
    return found


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_install_lines_work_from_a_clone(path: Path) -> None:
    known = extras()
    for where, kind, target, before in installs(path):
        clone = _CLONE.match(target)
        if clone:
            named = set((clone["extras"] or "").split(",")) - {""}
            assert named <= known, f"{where}: no such extra {sorted(named - known)}"
        else:
            # Not on PyPI yet: the name only appears as what to run once it is published.
            assert kind != "command", f"{where}: {target} is not published; install '.'"
            assert "published" in before, f"{where}: label {target} as for once published"


def test_each_install_command_has_its_published_form_beside_it() -> None:
    seen = 0
    for path in DOCS:
        by_block: dict[str, dict[str, set[str]]] = {}
        for where, kind, target, _ in installs(path):
            if kind == "prose":
                continue
            extra = target.strip(".").removeprefix(PACKAGE)
            by_block.setdefault(where.split("+")[0], {}).setdefault(kind, set()).add(extra)
        for block, forms in by_block.items():
            commands, comments = forms.get("command", set()), forms.get("comment", set())
            assert commands == comments, (
                f"{block}: installs {sorted(commands)} from the clone but shows the published "
                f"form of {sorted(comments)}"
            )
            seen += len(commands)
    assert seen, "no install command found: the parser has lost them"


def test_the_parser_reads_markers_and_refuses_stray_ones(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- not-run: needs a\n   real login -->\n```sh\nclaude login\n```\n\n"
        "  ```python\n  print(1)\n  ```\n",
        encoding="utf-8",
    )
    first, second = blocks(doc)
    assert (first.marker, first.arg, first.lang, first.text) == (
        "not-run",
        "needs a real login",
        "sh",
        "claude login\n",
    )
    assert (second.marker, second.lang, second.text) == (None, "python", "print(1)\n")
    for stray in (
        "<!-- not-run: why -->\ntext\n```sh\nls\n```\n",
        "<!-- notrun: why -->\n```sh\nls\n```\n",
    ):
        doc.write_text(stray, encoding="utf-8")
        with pytest.raises(MarkerError):
            blocks(doc)
