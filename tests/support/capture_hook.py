"""A command hook that records the events a real harness sends, for fixtures.

    python tests/support/capture_hook.py OUT.jsonl

appends each stdin event as one JSON line to OUT.jsonl and prints nothing (no opinion).
Used beside our hook when capturing tests/fixtures/harness-events/NAME/probe.jsonl from a
harness's real CLI; never installed for users (it writes argument contents).
"""

from __future__ import annotations

import json
import sys

MAX_EVENT_BYTES = 1 << 20

if __name__ == "__main__":
    event = json.loads(sys.stdin.read(MAX_EVENT_BYTES))
    with open(sys.argv[1], "a", encoding="utf-8") as out:
        out.write(json.dumps(event, sort_keys=True) + "\n")
