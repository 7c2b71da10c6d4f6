"""The product as a user installs it: the wheel scripts/setup built from this checkout,
installed (not editable) with its extras into a venv at a path over 100 characters
(.installed/, its directory name in .installed/venv).

End-to-end tests run the installed console script, interpreter, DSH plugin and guard
through `Installed`, never the editable checkout, so a file missing from the wheel, a
path that only works when short, or an import that only resolves from src/ fails a test.
"""

from __future__ import annotations

import functools
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hook_support import hook_env

REPO = Path(__file__).resolve().parents[2]
INSTALLED = REPO / ".installed"


def venv() -> Path | None:
    """The installed venv, or None when scripts/setup has not made one."""
    name = INSTALLED / "venv"
    if not name.is_file():
        return None
    path = INSTALLED / name.read_text().strip()
    return path if (path / "bin" / "python").exists() else None


def the_venv() -> Path:
    """The installed venv, for code that runs after the `installed` fixture checked it."""
    found = venv()
    assert found is not None, "no installed wheel in .installed/: run bash scripts/setup"
    return found


@functools.cache
def files(venv: Path) -> dict[str, str]:
    """Where the venv's interpreter imports the package from (`package`, its __init__.py),
    its `version`, and its data files (`plugin`, `skill`)."""
    python = venv / "bin" / "python"
    code = (
        "import json, dsh_circuit_breaker as p, dsh_circuit_breaker.dsh as d;"
        "print(json.dumps({'package': p.__file__, 'version': p.__version__,"
        " 'plugin': str(d.plugin_path()), 'skill': str(d.skill_path())}))"
    )
    done = subprocess.run(
        [str(python), "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    found: dict[str, str] = json.loads(done.stdout)
    return found


@dataclass(frozen=True)
class Installed:
    """The installed venv, seen from one test: its own scratch HOME (`home`) and the
    environment a user has there with the venv activated (`env`)."""

    venv: Path
    home: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def cli(self) -> Path:
        """The `dsh-circuit-breaker` console script pip wrote."""
        return self.venv / "bin" / "dsh-circuit-breaker"

    @property
    def env(self) -> dict[str, str]:
        env = hook_env(self.home)
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        env.pop("PYTHONPATH", None)  # nothing may reach the checkout's src/
        return env

    @property
    def package(self) -> Path:
        """The installed package's directory (its __init__.py's folder)."""
        return Path(files(self.venv)["package"]).parent

    @property
    def version(self) -> str:
        return files(self.venv)["version"]

    @property
    def plugin(self) -> Path:
        """The DSH plugin file inside the installed package."""
        return Path(files(self.venv)["plugin"])

    @property
    def skill(self) -> Path:
        return Path(files(self.venv)["skill"])

    def run(
        self, *args: str, env: dict[str, str] | None = None, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run the installed console script, as the user would type it."""
        kwargs.setdefault("timeout", 120)
        return subprocess.run(
            [str(self.cli), *args],
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            check=False,
            **kwargs,
        )
