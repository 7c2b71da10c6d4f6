"""The package's layers, read from its imports: no module imports from a layer above its
own. From the bottom: the core (config, rules, breaker, stores and the leaves around
them), the harness modules (what each harness's events and settings mean), the
transports that carry decisions (the command hook, the guard's stdio, HTTP and MCP
servers, the framework integrations, the transcript readers), and the commands a person
types. A module may import its own layer and the ones below."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

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
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    known = modules()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(_ours(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join([*base, *([node.module] if node.module else [])])
            else:
                stem = _ours(node.module or "")
            found.add(stem)
            found.update(f"{stem}.{a.name}".lstrip(".") for a in node.names)
    return {name for name in found if name in known}


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
