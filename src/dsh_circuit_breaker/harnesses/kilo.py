"""Kilo Code CLI (`@kilocode/cli`), OpenCode's fork: the same server-plugin API and the same
adapter (`js/opencode.mjs`), under its own names: the global plugin directory
`$XDG_CONFIG_HOME/kilo/plugins/` (default `~/.config/kilo/plugins/`), `kilo run`, and
`KILO_*` variables."""

from __future__ import annotations

from dataclasses import replace

from ._plugin import headless_run, in_user_dir
from .opencode import ANNOTATION_ARGS as ANNOTATION_ARGS
from .opencode import EXEMPT as EXEMPT  # the same tools under the same names
from .opencode import HARNESS as OPENCODE
from .opencode import config_dir, headless_for

NAME = "kilo"
LABEL = "Kilo Code"

HARNESS = replace(
    OPENCODE,
    name=NAME,
    label=LABEL,
    executable="kilo",
    package="@kilocode/cli",
    plugin_dir=in_user_dir(lambda: config_dir("kilo") / "plugins"),
    boot=headless_run(headless_for("kilo", "KILO")),
    extra_loads=1,  # `kilo run` sometimes loads its plugins once more as it exits
)
add_arguments, install, uninstall, doctor = HARNESS.entry_points()
