"""`python mcp_tap.py LOG COMMAND [ARGS...]`: runs an MCP server unchanged and appends to LOG,
one line per message the client sent it, its method (with the tool's name for a
`tools/call`): what the server really saw, for tests of the relay in front of it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading


def main(log: str, command: list[str]) -> int:
    server = subprocess.Popen(command, stdin=subprocess.PIPE, bufsize=0)
    assert server.stdin is not None

    def forward() -> None:
        assert server.stdin is not None
        with open(log, "a", encoding="utf-8") as seen:
            for line in sys.stdin.buffer:
                try:
                    message = json.loads(line)
                    method = message.get("method", "(answer)")
                    if method == "tools/call":
                        method += " " + message["params"]["name"]
                except (ValueError, AttributeError, KeyError, TypeError):
                    method = "(not JSON-RPC)"
                seen.write(method + "\n")
                seen.flush()
                server.stdin.write(line)
        server.stdin.close()

    threading.Thread(target=forward, daemon=True).start()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
