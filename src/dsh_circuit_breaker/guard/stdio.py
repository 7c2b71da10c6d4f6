"""`dsh-circuit-breaker serve --stdio`: the guard over stdio, which every JavaScript plugin
(js/guard.mjs, under js/dsh.mjs and the other plugins) starts and talks to.

One long-lived process holds one CircuitBreaker; the plugin (the DSH js/dsh.mjs, or any
other host) writes one JSON object per line on stdin and reads one per line on stdout.

Requests (`id` is echoed back in the reply; any JSON value):

    {"op": "hello", "id": 0, "config": {...}, "state": "memory://"}
        -> {"id": 0, "ok": true, "version": "...", "config": {...effective...}}
        -> {"id": 0, "ok": false, "error": "config key window: ..."}      (nothing changed)
    {"op": "hello", "id": 0, "harness": "cline", "configFile": null, "config": {}, ...}
        the config a command hook of that harness would load (`configFile`, else
        $DSH_CIRCUIT_BREAKER_CONFIG, else the user config file; the harness's exempt
        spellings; the incident log on) and its state URL, `config` keys over it
    {"op": "check", "id": 7, "agent": "session-1", "tool": "bash", "arguments": {...}}
    {"op": "check", "id": 8, "anon": "anon:3", "agentKeys": ["loopCtx", ...], "tool": ...}
        -> {"id": 7, "allowed": true}
        -> {"id": 7, "allowed": false, "kind": "duplicate", "message": "...", "count": 6,
            "limit": 6, "stop": false}
        -> {..., "allowed": false, "stop": true, "stopReason": "..."}  (end the agent)
    {"op": "result", "agent": "session-1", "tool": "bash", "arguments": {...}, "result": "..."}
        (or "anon"): what an allowed call returned (text, or any JSON value), for
        `resultProgress` and `sameResultLimit` (docs/results.md); the agent, tool and
        arguments as its `check` sent them. No reply unless it has an `id` (then
        `{"id": 10, "ok": true}`); one without a tool name is dropped (with the one
        warning, as any bad request)
    {"op": "forget", "agent": "session-1"}   (or "anon"): drop that agent's state
    {"op": "ping", "id": 9}  -> {"id": 9, "ok": true}

`agent` is the id the harness knows the agent by; it is the incident log's `agent`. A
host whose agent has no id sends `anon` (its own stable key for the object) and
`agentKeys` (the object's field names), which is what the incident log then carries.

Bad input never crashes the process and never denies: a line that is not a request
gets `{"allowed": true, "error": ...}`, with one warning on stderr. So does a line
longer than MAX_REQUEST_BYTES, which is skipped without being held in memory (its reply
carries the `id` that ends the line, if one does, as the plugin's requests do). Requests
holding NaN or Infinity are refused, and no config value can be one, so every reply is
strict JSON. stdout carries only replies; warnings go to stderr, which the plugin
forwards to the host's log.

A `hello` whose state store cannot be used right now (a path that cannot be created,
Redis not answering) still answers `ok: true`, since each call then fails open (or
closed, with failClosed) and a shared store may come back; the reply carries `warning`,
and the same line goes to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from .. import usage
from .._version import __version__
from ..core._log import warn
from ..core.assembly import Assembly
from ..core.config import Config, ConfigError
from ..core.stores import StoreUnavailable
from .core import harness_assembly

Reply = dict[str, Any]

# A check carries the call's arguments: as much as a hook event may hold (hook.py).
MAX_REQUEST_BYTES = 16 * 1024 * 1024


class _Unnamed(dict[str, None]):
    """Stands for an agent that has no id: its mapping keys are the agent's field names,
    all None, so the breaker finds no id in it and logs `agentKeys` instead. A dict
    subclass can be weakly referenced, so the breaker's per-object bookkeeping lets go
    of it once `forget` drops our reference."""


class GuardServer:
    """Turns request objects into reply objects; the I/O loop is `serve`."""

    def __init__(self, config: Config | None = None, state: str | None = None) -> None:
        self.breaker = Assembly("stdio", config or Config(), state).breaker()
        self._state = state  # a hello without its own state URL keeps this one
        self._unnamed: dict[str, _Unnamed] = {}
        self._warned = False
        self._ops: dict[str, Callable[[dict[str, Any]], Reply | None]] = {
            "check": self._check,
            "hello": self._hello,
            "forget": self._forget,
            "result": self._result,
            "ping": lambda request: {"ok": True},
        }

    def handle_line(self, line: bytes) -> Reply | None:
        """The reply to one request line (None: no reply wanted)."""
        request: Any = None
        try:
            request = json.loads(line, parse_constant=_no_constant)
            if not isinstance(request, dict):
                raise ValueError("a request must be a JSON object")
            op = self._ops.get(request.get("op", "check"))
            if op is None:
                raise ValueError(f"unknown op {request.get('op')!r}")
            reply = op(request)
        except Exception as exc:
            self._warn_once(f"bad request ({type(exc).__name__}: {exc}); allowed")
            reply = {"allowed": True, "error": f"{type(exc).__name__}: {exc}"}
        if reply is None:
            return None
        if isinstance(request, dict) and "id" in request:
            if _strict(request["id"]):
                reply["id"] = request["id"]
            else:
                self._warn_once("a request id out of JSON's number range; not echoed")
                reply["error"] = "the request's id is out of JSON's number range"
        return reply

    def oversized(self, tail: bytes) -> Reply:
        """The reply to a line longer than MAX_REQUEST_BYTES, of which `tail` is the end."""
        why = f"request line longer than {MAX_REQUEST_BYTES} bytes, not judged"
        self._warn_once(f"{why}; allowed")
        reply: Reply = {"allowed": True, "error": why}
        _, found, value = tail.rstrip().rpartition(b'"id":')
        if found and value.endswith(b"}"):
            try:
                ident = json.loads(value[:-1], parse_constant=_no_constant)
            except ValueError:
                return reply
            if isinstance(ident, (int, str)):
                reply["id"] = ident
        return reply

    def close(self) -> None:
        self.breaker.close()

    def _check(self, request: dict[str, Any]) -> Reply:
        tool = request.get("tool")
        if not isinstance(tool, str) or not tool:
            raise ValueError("check needs a tool name")
        call_id = request.get("callId")
        decision = self.breaker.check(
            self._agent(request),
            tool,
            request.get("arguments"),
            call_id if isinstance(call_id, str) else None,
        )
        if decision.allowed:
            return {"allowed": True}
        return {
            "allowed": False,
            "kind": decision.kind,
            "message": decision.message,
            "count": decision.count,
            "limit": decision.limit,
            "stop": decision.stop,
            **({"stopReason": decision.stop_reason} if decision.stop else {}),
        }

    def _hello(self, request: dict[str, Any]) -> Reply:
        raw = request.get("config") or {}
        state = request.get("state") or self._state
        try:
            if state is not None and not isinstance(state, str):
                raise ConfigError(f"state must be a URL string, got {type(state).__name__}")
            config, state = self._config(request, raw, state)
            harness = request.get("harness")
            label = harness if isinstance(harness, str) and harness else "stdio"
            breaker = Assembly(label, config, state or None).breaker()
        except Exception as exc:  # a state URL that can never work is as fatal as a bad key
            return {"ok": False, "error": str(exc) or type(exc).__name__}
        reply: Reply = {"ok": True, "version": __version__, "config": config.to_mapping()}
        try:
            breaker.store.open()
        except StoreUnavailable as exc:
            reply["warning"] = f"state store unavailable ({exc})"
            warn("dsh-circuit-breaker guard: %s", reply["warning"])
        old, self.breaker = self.breaker, breaker
        self._unnamed.clear()
        old.close()
        return reply

    @staticmethod
    def _config(request: dict[str, Any], raw: Any, state: str | None) -> tuple[Config, str | None]:
        """The hello's own config, or with `harness`, that harness's hook config under it."""
        harness = request.get("harness")
        if harness is None:
            return Config.from_mapping(raw), state
        path = request.get("configFile")
        if path is not None and not isinstance(path, str):
            raise ConfigError(f"configFile must be a path, got {type(path).__name__}")
        found = harness_assembly(harness, path, state)
        return Config.from_mapping(raw, base=found.config), found.url

    def _result(self, request: dict[str, Any]) -> Reply | None:
        tool = request.get("tool")
        if isinstance(tool, str) and tool:
            # observe never raises, and is a no-op unless the config observes results.
            self.breaker.observe(
                self._agent(request), tool, request.get("arguments"), request.get("result")
            )
        else:
            self._warn_once("a result without a tool name; dropped")
        return {"ok": True} if "id" in request else None

    def _forget(self, request: dict[str, Any]) -> Reply | None:
        anon = request.get("anon")
        if isinstance(anon, str):
            agent = self._unnamed.pop(anon, None)
            if agent is not None:
                self.breaker.reset(agent)
        agent_id = request.get("agent")
        if isinstance(agent_id, str) and agent_id:
            self.breaker.reset(agent_id)
        return {"ok": True} if "id" in request else None

    def _agent(self, request: dict[str, Any]) -> str | _Unnamed:
        agent_id = request.get("agent")
        if isinstance(agent_id, (str, int)) and not isinstance(agent_id, bool) and agent_id != "":
            return str(agent_id)
        anon = request.get("anon")
        key = anon if isinstance(anon, str) and anon else "anon:none"
        found = self._unnamed.get(key)
        if found is None:
            names = request.get("agentKeys")
            fields = [str(n) for n in names] if isinstance(names, list) else []
            found = self._unnamed[key] = _Unnamed((name, None) for name in fields)
        return found

    def _warn_once(self, text: str) -> None:
        if not self._warned:
            self._warned = True
            warn("dsh-circuit-breaker guard: %s (further bad requests not reported)", text)


def serve(server: GuardServer, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Answer requests until stdin closes (the host exited or let go of us)."""
    write = stdout.write
    flush = stdout.flush
    while True:
        line = stdin.readline(MAX_REQUEST_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_REQUEST_BYTES and not line.endswith(b"\n"):
            reply: Reply | None = server.oversized(_skip_line(stdin, line))
        elif not line.strip():
            continue
        else:
            reply = server.handle_line(line)
        if reply is not None:
            write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
            flush()


def _skip_line(stdin: BinaryIO, start: bytes) -> bytes:
    """Read past the rest of an overlong line, keeping only its last bytes."""
    tail = start[-256:]
    while not tail.endswith(b"\n"):
        chunk = stdin.readline(65536)
        if not chunk:
            break
        tail = (tail + chunk)[-256:]
    return tail


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _strict(value: Any) -> bool:
    """`value` can be written as strict JSON: `1e999` parses, as infinity, and cannot."""
    if isinstance(value, (int, str)):
        return True
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def run(config_json: str | None, state: str | None) -> int:
    """`serve --stdio`: answer requests on stdin until it closes."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    try:
        config = Config.from_mapping(json.loads(config_json)) if config_json else None
    except (ValueError, ConfigError) as exc:
        return usage.error(f"serve --stdio --config-json: {exc}")
    try:
        server = GuardServer(config, state)
    except (ValueError, ConfigError) as exc:
        return usage.error(f"serve --stdio: {exc}")
    try:
        serve(server, sys.stdin.buffer, sys.stdout.buffer)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        server.close()
    return 0
