"""A harness's own terminal UI, driven as a person drives it: started in a detached tmux
session of a fixed size, typed into with `send-keys`, read with `capture-pane`.

Every screen a test waits for is kept in `.test-output/screens/<test>/NN-what.txt` beside
the repository (gitignored), so a person can read what the harness showed at each step.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCREENS = REPO / ".test-output" / "screens"
WIDTH, HEIGHT = 160, 50


def available() -> bool:
    return shutil.which("tmux") is not None


class Terminal:
    """One program in a tmux session, in its own tmux server (`-L`), so nothing a test does
    reaches a person's own tmux."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.socket = f"dsh-cb-{uuid.uuid4().hex[:12]}"
        self.session = "ui"
        self.screens = SCREENS / re.sub(r"[^\w.-]+", "-", name)
        shutil.rmtree(self.screens, ignore_errors=True)
        self.screens.mkdir(parents=True)
        self._kept = 0
        # tmux's server passes the client's environment only in part: the program starts
        # under `env -i` with exactly the environment given.
        program = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *command])
        self._tmux(
            "new-session", "-d", "-s", self.session, "-x", str(WIDTH), "-y", str(HEIGHT),
            "-c", str(cwd), program,
        )  # fmt: skip
        self._tmux("set-option", "-t", self.session, "remain-on-exit", "on")

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]}: {done.stderr.strip()}")
        return done.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-t", self.session)

    def keep(self, what: str) -> str:
        """Save the screen as the next numbered capture; returns it."""
        text = self.screen()
        self._kept += 1
        (self.screens / f"{self._kept:02d}-{what}.txt").write_text(text, encoding="utf-8")
        return text

    def type(self, text: str) -> None:
        """Type `text` and press Enter, as two key events: a UI that sees text and Enter in
        one burst takes it for a paste, and the Enter for a newline in the input."""
        self._tmux("send-keys", "-t", self.session, "-l", text)
        time.sleep(1.0)
        self.press("Enter")

    def press(self, *keys: str) -> None:
        for key in keys:
            self._tmux("send-keys", "-t", self.session, key)
            time.sleep(0.5)

    def choose(
        self, option: str, key: str, what: str, seconds: float = 60, cursor: str = "❯●→"
    ) -> None:
        """In a menu, press `key` until the cursor (one of `cursor`'s characters: `❯`,
        Gemini CLI's `●`, Kimi CLI's `→`) is on the line of `option`, then Enter: a UI under
        load may drop a key sent before it draws, so each step is seen on screen."""
        self.wait_for(re.escape(option), what, seconds)
        mark = "[" + re.escape(cursor) + "]"
        line = rf"(?m){mark}\s*(\d+\.\s*)?" + re.escape(option) + r"\s*(\(\w+\))?[\s│]*$"
        selected = re.compile(line)
        deadline = time.monotonic() + seconds
        while not selected.search(self.screen()):
            if time.monotonic() > deadline:
                self.keep(f"{what}-timeout")
                raise AssertionError(f"could not select {option!r}:\n{self.screen()}")
            self.press(key)
            time.sleep(0.5)
        self.press("Enter")

    def wait_for(self, pattern: str, what: str, seconds: float = 120) -> str:
        """The screen once `pattern` (a regular expression) shows on it, kept as `what`;
        AssertionError with the last screen when it does not within `seconds`."""
        deadline = time.monotonic() + seconds
        found = re.compile(pattern)
        while True:
            text = self.screen()
            if found.search(text):
                return self.keep(what)
            if time.monotonic() > deadline:
                self.keep(f"{what}-timeout")
                raise AssertionError(f"no {pattern!r} on the screen within {seconds} s:\n{text}")
            time.sleep(0.5)

    def alive(self) -> bool:
        dead = self._tmux("display-message", "-p", "-t", self.session, "#{pane_dead}")
        return dead.strip() != "1"

    def close(self) -> None:
        """End the program and whatever it started (a harness that relaunches itself as a
        child, which a hang-up alone would leave running), then the tmux server."""
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired, ValueError, OSError):
            pid = int(self._tmux("display-message", "-p", "-t", self.session, "#{pane_pid}"))
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._tmux("kill-server")

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plain_env(**values: str) -> dict[str, str]:
    """The environment of a program a person starts from a shell: PATH and the locale kept,
    the rest given."""
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL") if k in os.environ}
    return {**keep, "TERM": "xterm-256color", **values}
