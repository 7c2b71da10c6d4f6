"""`dsh-circuit-breaker dsh-package`: the plugin as an npm package for DSH's own plugin
manager, `dsh plugin --profile NAME add FILE.tgz`, written here from this installation;
nothing is fetched or published.

The package is a DSH bundle (`dsh.bundle.patch` in its package.json): its patch layer
inserts the circuit-breaker entry whose module is this installation's plugin file, by
absolute path, so the plugin DSH loads is always the one this Python package serves. The
bundle layer applies before the profile's own patch file, so override rows there
configure the entry as usual.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shlex
import sys
import tarfile
import tempfile
from pathlib import Path

from .._version import __version__
from ..usage import error, os_error
from . import NPM_NAME, insert_row

BUNDLE_PATCH = "cordis.patch.yml"
MTIME = 499162500  # npm pack's fixed timestamp (1985-10-26), so the tarball is reproducible


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default=".",
        metavar="DIR",
        help="directory to write the .tgz into (default: the current one)",
    )
    parser.add_argument(
        "--python",
        metavar="PYTHON",
        default=sys.executable,
        help="interpreter for the guard process (default: this one)",
    )


def package_files(python: str) -> dict[str, str]:
    """Path inside the package -> its text."""
    manifest = {
        "name": NPM_NAME,
        "version": __version__,
        "description": "dsh-circuit-breaker's DSH plugin, from the Python package beside it",
        "private": True,
        "dsh": {"bundle": {"patch": f"./{BUNDLE_PATCH}"}},
    }
    patch = [
        "# Written by `dsh-circuit-breaker dsh-package`; configure the entry in the profile's",
        "# cordis.patch.yml:  - id: circuit-breaker",
        "#                      config: {duplicateLimit: 6}",
        *insert_row(python),
        "",
    ]
    return {
        "package.json": json.dumps(manifest, indent=2) + "\n",
        BUNDLE_PATCH: "\n".join(patch),
    }


def write_package(out: Path, python: str) -> Path:
    """Write the npm tarball (npm pack's layout: every file under `package/`) into `out`."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.USTAR_FORMAT) as tar,
    ):
        for name, text in package_files(python).items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"package/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, MTIME
            tar.addfile(info, io.BytesIO(data))
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{NPM_NAME}-{__version__}.tgz"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=out)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getvalue())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def run(args: argparse.Namespace) -> int:
    python = str(Path(args.python).absolute())
    try:
        target = write_package(Path(args.out).expanduser().absolute(), python)
    except OSError as exc:
        return error(f"dsh-package: {os_error(exc)}")
    print(f"wrote {target}")
    print(f"install it: dsh plugin --profile NAME add {shlex.quote(str(target))}")
    print("then check: dsh-circuit-breaker doctor dsh --profile NAME")
    return 0
