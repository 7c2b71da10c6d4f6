"""The package's layers, read from its imports: no module imports from a layer above its
own. From the bottom: the core (config, rules, breaker, stores and the leaves around
them), the harness modules (what each harness's events and settings mean), the
transports that carry decisions (the command hook, the guard's stdio, HTTP and MCP
servers, the framework integrations, the transcript readers), and the commands a person
types. A module may import its own layer and the ones below.

The modules a command hook runs for a call are the kernel (`core/` and the few above it
on the hook's path): only they are written for speed (`core/__init__.py` says how), no
module of theirs loads one outside at its top, and every other module imports plainly
at its top.

Besides the layers, imports go one way: no module imports itself back through others
(a circle), counting imports inside functions too, and no JavaScript file imports from
above its own directory."""

from __future__ import annotations

import ast
import functools
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_circuit_breaker.harnesses import FRAMEWORK_HOOKS, HARNESSES
from test_hook import HOOK_MODULES

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "dsh_circuit_breaker"
NAME = "dsh_circuit_breaker"

# The first entry that names a module or a package holding it gives its layer (one ending
# in `_` names a prefix); any other module is core.
LAYERS: list[tuple[str, int]] = [
    ("commands", 3),
    ("cli", 3),
    ("demo", 3),
    ("demo_http", 3),
    ("dsh.package", 3),
    ("transcripts.cmd_", 3),
    ("guard", 2),
    ("hook", 2),
    ("integrations", 2),
    ("transcripts", 2),
    ("judge", 1),
    ("harnesses", 1),
    ("dsh", 1),  # the DSH plugin's files and its config reader, which its harness uses
]
NAMES = {0: "core", 1: "harnesses", 2: "transports", 3: "commands"}


def layer(module: str) -> int:
    for name, level in LAYERS:
        if module == name or module.startswith(name if name.endswith("_") else name + "."):
            return level
    return 0


@functools.cache
def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path) -> set[str]:
    """The package's modules `module` imports, at its top or inside a function (`from X
    import Y` imports X, and Y too where Y is a module)."""
    package = _package(module, path)
    known = modules()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(_ours(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            stem = _stem(node, package)
            found.add(stem)
            found.update(f"{stem}.{a.name}".lstrip(".") for a in node.names)
    return {name for name in found if name in known}


def runtime_imports(module: str, path: Path) -> set[str]:
    """The package's modules `module` runs, at its top or inside a function, for the
    circle test: a `from X import Y` counts X.Y where Y is a module and X otherwise, and
    X itself unless it is a package holding `module` (always imported before it).
    Imports under `if TYPE_CHECKING:` never run, and are left out."""
    package = _package(module, path)
    parts = module.split(".") if module else []
    holders = {".".join(parts[:i]) for i in range(len(parts))}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for statement in node.body
        for inner in ast.walk(statement)
    }
    known = modules()
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(_ours(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            stem = _stem(node, package)
            found |= _named(node, stem)
            if stem not in holders:
                found.add(stem)
    return {name for name in found if name in known and name != module}


def _package(module: str, path: Path) -> str:
    """The package `module`'s relative imports start from."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _named(node: ast.ImportFrom, stem: str) -> set[str]:
    """The modules a `from X import Y, ...` runs: X.Y where Y is a module, else X."""
    found = {f"{stem}.{alias.name}".lstrip(".") for alias in node.names}
    return {name if name in modules() else stem for name in found}


def _stem(node: ast.ImportFrom, package: str) -> str:
    """The module a `from X import ...` in `package` names, as `_ours` gives it."""
    if not node.level:
        return _ours(node.module or "")
    base = package.split(".") if package else []
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _ours(name: str) -> str:
    """A module of this package by its name in the package (others come out unknown)."""
    return name.removeprefix(NAME).lstrip(".") if name.startswith(NAME) else f"-{name}"


def test_the_layers_cover_every_module() -> None:
    assert {"hook", "guard.stdio", "guard.core", "harnesses", "commands.status"} <= set(modules())


@pytest.mark.parametrize("module", sorted(modules()))
def test_no_module_imports_from_a_layer_above_its_own(module: str) -> None:
    own = layer(module)
    above = {
        imported: NAMES[layer(imported)]
        for imported in imports(module, modules()[module])
        if imported and layer(imported) > own
    }
    assert not above, f"{module} ({NAMES[own]}) imports from above: {above}"


def test_the_guard_depends_on_no_command() -> None:
    for module, path in modules().items():
        if module.startswith("guard"):
            commands = {m for m in imports(module, path) if m.startswith("commands")}
            assert not commands, f"{module} imports {commands}"


def circles() -> list[list[str]]:
    """Every group of modules that import each other, directly or round about (the strongly
    connected components of the import graph with more than one module)."""
    graph = {module: runtime_imports(module, path) for module, path in modules().items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm; the graph is a few hundred nodes
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in graph[module]:
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            group = [stack.pop()]
            while group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return found


def test_no_import_circle() -> None:
    assert circles() == []


def test_a_circle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The circle test can fail: two modules importing each other, one of them inside a
    function, and a package holding a module that imports the package's own names."""
    package = tmp_path / NAME
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f():\n    from .a import X\n")
    (package / "c.py").write_text("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from . import d\n")
    (package / "d.py").write_text("from . import c\n")
    (package / "sub" / "__init__.py").write_text("def f():\n    from . import e\n")
    (package / "sub" / "e.py").write_text("from . import NAME\n")
    (package / "sub" / "f.py").write_text("from . import e\n")
    monkeypatch.setattr(f"{__name__}.PACKAGE", package)
    modules.cache_clear()
    try:
        assert circles() == [["a", "b"], ["sub", "sub.e"]]
    finally:
        modules.cache_clear()


# `import ... from "../x.mjs"`, `export ... from`, and `import("../x.mjs")`.
JS_IMPORT = re.compile(r"""(?:\bfrom|\bimport)\s*\(?\s*["']([^"']+)["']""")


def upward_js_imports(text: str) -> list[str]:
    """The relative imports in a JavaScript module's text that leave its directory."""
    return [spec for spec in JS_IMPORT.findall(text) if spec.startswith("../")]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.mjs")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_javascript_module_imports_from_above_its_directory(path: Path) -> None:
    assert upward_js_imports(path.read_text(encoding="utf-8")) == []


def test_an_upward_javascript_import_is_found() -> None:
    text = (
        "import { a } from './guard.mjs';\n"
        "import {\n  b,\n} from '../js/guard.mjs';\n"
        'export { c } from "../../x.mjs";\n'
        "const d = await import('../d.mjs');\n"
    )
    assert upward_js_imports(text) == ["../js/guard.mjs", "../../x.mjs", "../d.mjs"]


def kernel() -> set[str]:
    """The modules a command hook may run for a call: the `core` package, and above it the
    entry point, the hook, the event types, the registry and each command-hook harness's
    module (`core/__init__.py` says why they are written for speed)."""
    above = {
        "",
        "cli",
        "hook",
        "judge",
        "harnesses",
        "harnesses._defaults",
        "harnesses._pretooluse",
        "_version",  # the version string the build writes, which telemetry names
    }
    harnesses = {
        _ours(load().__name__) for load in [*HARNESSES.values(), *FRAMEWORK_HOOKS.values()]
    }
    return {m for m in modules() if m == "core" or m.startswith("core.")} | above | harnesses


def speed_tricks(path: Path) -> list[str]:
    """What in a module's text is there for speed: `TYPE_CHECKING = False`, and an import
    of the standard library or of this package inside a function (a third-party one there
    is an optional extra's, loaded only where it is used; one under `try:` or under a
    `sys.version_info` test is a platform's or a Python version's)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [
        f"{n.lineno}: TYPE_CHECKING = False"
        for n in tree.body
        if ast.unparse(n) == "TYPE_CHECKING = False"
    ]
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        guarded = {
            id(inner)
            for node in ast.walk(function)
            if isinstance(node, ast.Try)
            or (isinstance(node, ast.If) and "sys.version_info" in ast.unparse(node.test))
            for statement in node.body
            for inner in ast.walk(statement)
        }
        found += [
            f"{node.lineno}: {ast.unparse(node)}"
            for node in ast.walk(function)
            if id(node) not in guarded and _ours_or_standard(node)
        ]
    return sorted(set(found))


def _ours_or_standard(node: ast.AST) -> bool:
    ours = {"dsh_circuit_breaker", *sys.stdlib_module_names}
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] in ours
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] in ours for alias in node.names)
    return False


def test_the_kernel_holds_what_an_allowed_call_imports() -> None:
    assert {_ours(m) for m in HOOK_MODULES} <= kernel()


def test_the_kernel_imports_from_no_module_outside_it_at_its_top() -> None:
    """A kernel module may load a command's module inside a function (the entry point
    does), never at its top, or the hook would pay for it on every call."""
    inside = kernel()
    for module in sorted(inside):
        path = modules()[module]
        package = _package(module, path)
        top: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                top.update(_ours(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                top |= _named(node, _stem(node, package))
        outside = {m for m in top if m in modules() and m not in inside}
        assert not outside, f"{module} imports {outside} at its top"


# Where a person's client waits for one of our processes to start, beside the hook: a
# plugin's guard (`serve --stdio`, started for each session before its first tool call)
# and an MCP relay (`mcp`, one per server a client starts). Their dispatchers and the
# relay's harness module load the HTTP server and the install code only when asked for.
STARTS = {"guard.cli", "guard.mcp_command", "harnesses.mcp"}


@pytest.mark.parametrize("module", sorted(set(modules()) - kernel() - STARTS))
def test_outside_the_kernel_a_module_imports_plainly_at_its_top(module: str) -> None:
    assert speed_tricks(modules()[module]) == []


def test_a_speed_trick_is_found(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "import os\nTYPE_CHECKING = False\n"
        "def f():\n    import json\n    from . import x\n    import numpy\n"
        "    try:\n        import resource\n    except ImportError:\n        pass\n"
        "    if sys.version_info >= (3, 11):\n        import tomllib\n"
    )
    assert speed_tricks(path) == [
        "2: TYPE_CHECKING = False",
        "4: import json",
        "5: from . import x",
    ]


def test_a_harness_transport_builds_its_breaker_only_through_assembly() -> None:
    """The command hook and the guard's servers get a harness's config, state and breaker
    from `assembly.Assembly`, so a call is judged the same whichever way it arrives."""
    for module, path in modules().items():
        if module != "hook" and not module.startswith("guard"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                where = f"{module}:{node.lineno}"
                assert name not in {"CircuitBreaker", "hook_config"}, where


# Only a type checker reads it: it stands on Protocols the kernel declares for mypy alone.
TYPE_CHECKING_ONLY = {"harnesses._contract"}


@pytest.mark.parametrize("module", sorted(set(modules()) - TYPE_CHECKING_ONLY))
def test_every_module_imports(module: str) -> None:
    """Imports at a module's top run when it loads: one naming what exists only for a
    type checker, or a circle that only `if TYPE_CHECKING:` hid, fails here. A missing
    optional extra (a framework's package) is not ours to have."""
    try:
        importlib.import_module(".".join(filter(None, [NAME, module])))
    except ModuleNotFoundError as error:
        assert not (error.name or "").startswith(NAME), error


START_CODE = (
    "import sys\n"
    "from dsh_circuit_breaker.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "print(' '.join(sorted(sys.modules)))\n"
)


@pytest.mark.parametrize(
    "argv",
    [["serve", "--stdio"], ["mcp", "--", sys.executable, "-c", "pass"]],
    ids=["guard", "relay"],
)
def test_a_plugins_guard_and_an_mcp_relay_start_without_the_http_server(
    argv: list[str], tmp_path: Path
) -> None:
    """STARTS' point: the stdio guard and the stdio relay never load the HTTP server (with
    asyncio and ssl) nor the install code."""
    done = subprocess.run(
        [sys.executable, "-c", START_CODE, *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")},
    )
    loaded = set(done.stdout.split())
    assert f"{NAME}.guard.stdio" in loaded or f"{NAME}.guard.mcp" in loaded, done.stderr
    unwanted = {f"{NAME}.guard.http", f"{NAME}.guard.mcp_http", f"{NAME}.harnesses._mcp_clients"}
    assert not loaded & (unwanted | {"asyncio", "ssl"})
