"""JSON as the peers we stand between read it, so that a call is judged on what they run.

`cjson.loads` is strict, and that is right for our own files; but a harness or an MCP
server reads more: Node's `JSON.parse` has no depth limit and reads an integer of any
length, and the MCP SDKs decode invalid UTF-8 with replacement characters. A call our
parser rejected would run unjudged. `read` accepts what they accept:

- bytes that are not UTF-8 are read as they read them, each bad byte U+FFFD;
- an integer too long for Python's `int` (`sys.get_int_max_str_digits`) is its digits, a
  string (`BigInteger`): identical copies stay identical, and different ones different;
- containers nested deeper than MAX_DEPTH are each one opaque value, a digest of their
  text, (`{"dsh-circuit-breaker/opaque": hex}`) so nothing recurses and memory stays
  bounded, while identical copies still count as identical.

Numbers keep their text (`Integer`, `Number`, `BigInteger`, each with `.text`): a
JSON-RPC id is echoed byte for byte (`1E400` is not `Infinity`, `-0` not `0`); as values
they are the plain int and float, so a call's key is what `cjson.loads` would give.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from .cjson import _c

MAX_DEPTH = 100  # containers past this depth are opaque: no tool's arguments nest so deep
OPAQUE = "dsh-circuit-breaker/opaque"
_WHITESPACE = " \t\n\r"
_STRUCTURE = re.compile(r'["\[\]{}]')
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SEPARATORS = re.compile(rb'["\[\]{},]')
_big = threading.local()  # .seen: the value being read holds a BigInteger


class Integer(int):
    text: str


class Number(float):
    text: str


class BigInteger(str):
    """An integer Python will not convert (too many digits): its digits, as a string."""

    text: str


def _integer(text: str) -> Any:
    try:
        value: Any = Integer(text)
    except ValueError:  # past sys.get_int_max_str_digits()
        value = BigInteger(text)
        _big.seen = True
    value.text = text
    return value


def _number(text: str) -> Number:
    value = Number(text)
    value.text = text
    return value


class _Context:
    """What `_json.make_scanner` reads: json's defaults, numbers with their text."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = staticmethod(_number)
    parse_int = staticmethod(_integer)

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


_scan = _c.make_scanner(_Context())


def read(data: bytes | str) -> tuple[Any, list[str]]:
    """The JSON value in `data` and what was unusual about it (a phrase each: empty for
    ordinary JSON); ValueError when it holds no JSON value at all."""
    notes: list[str] = []
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", "replace")
            notes.append("invalid UTF-8 read as U+FFFD, as the other side reads it")
    else:
        text = data
    start = _skip_space(text, 0)
    _big.seen = False
    try:
        value, end = _scan(text, start)
    except StopIteration:
        raise ValueError("not JSON") from None
    except RecursionError:
        value, end = _tree(text, start)
        notes.append(f"nesting past {MAX_DEPTH} levels read as digests of its text")
    if _skip_space(text, end) != len(text):
        raise ValueError("not JSON: data after the value")
    if _big.seen:
        notes.append("an integer too long for Python read as its digits")
    return value, notes


def id_text(value: Any) -> str | None:
    """A JSON-RPC id's own text, when `read` kept it (a number)."""
    text = getattr(value, "text", None)
    return text if isinstance(text, str) else None


def elements(data: bytes) -> list[bytes]:
    """The bytes of each element of the JSON array `data` (one `read` accepted), as sent."""
    pos = data.index(b"[") + 1
    start, depth, found = pos, 0, []
    while match := _SEPARATORS.search(data, pos):
        mark, pos = match.group(), match.end()
        if mark == b'"':
            string = _STRING.match(data, match.start())
            if string is None:
                break
            pos = string.end()
        elif mark in (b"[", b"{"):
            depth += 1
        elif depth > 0 and mark != b",":
            depth -= 1
        elif depth == 0:
            item = data[start : match.start()].strip()
            if item or mark == b",":
                found.append(item)
            if mark != b",":
                return found
            start = pos
    raise ValueError("not a JSON array")


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    return pos


def _tree(text: str, pos: int) -> tuple[Any, int]:
    """The value at `pos` built without recursion, containers past MAX_DEPTH opaque."""
    stack: list[Any] = []  # the open containers
    keys: list[Any] = []  # the key each open object's next value goes under
    while True:
        opening = text[pos : pos + 1]
        if opening in ("[", "{") and len(stack) >= MAX_DEPTH:
            end = _skip_container(text, pos)
            value: Any = opaque(text[pos:end].encode("utf-8", "surrogatepass"))
            pos = end
        elif opening in ("[", "{"):
            container: Any = [] if opening == "[" else {}
            pos = _skip_space(text, pos + 1)
            if text[pos : pos + 1] == ("]" if opening == "[" else "}"):
                value, pos = container, pos + 1
            else:
                stack.append(container)
                key, pos = _key(text, pos) if opening == "{" else (None, pos)
                keys.append(key)
                continue
        else:
            value, pos = _scalar(text, pos)
        while True:  # `value` is complete: into its container, and on to the next
            if not stack:
                return value, pos
            top = stack[-1]
            if isinstance(top, list):
                top.append(value)
            else:
                top[keys[-1]] = value
            pos = _skip_space(text, pos)
            mark = text[pos : pos + 1]
            if mark == ",":
                pos = _skip_space(text, pos + 1)
                if isinstance(top, dict):
                    keys[-1], pos = _key(text, pos)
                break
            if mark != ("]" if isinstance(top, list) else "}"):
                raise ValueError(f"not JSON at {pos}")
            value, pos = stack.pop(), pos + 1
            keys.pop()


def _scalar(text: str, pos: int) -> tuple[Any, int]:
    try:
        value, end = _scan(text, pos)  # never a container here: no recursion
    except StopIteration:
        raise ValueError(f"not JSON at {pos}") from None
    return value, end


def _key(text: str, pos: int) -> tuple[str, int]:
    if text[pos : pos + 1] != '"':
        raise ValueError(f"not JSON at {pos}: a key expected")
    key, pos = _c.scanstring(text, pos + 1, True)
    pos = _skip_space(text, pos)
    if text[pos : pos + 1] != ":":
        raise ValueError(f"not JSON at {pos}: ':' expected")
    return key, _skip_space(text, pos + 1)


def _skip_container(text: str, pos: int) -> int:
    """Where the container opening at `pos` ends (its brackets balanced, strings read)."""
    depth = 0
    while match := _STRUCTURE.search(text, pos):
        mark, pos = match.group(), match.end()
        if mark == '"':
            _, pos = _c.scanstring(text, pos, True)
        elif mark in "[{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return pos
    raise ValueError("not JSON: a container is not closed")


def opaque(raw: bytes | memoryview) -> dict[str, str]:
    """A value not built, standing for the JSON text `raw`: the same text, the same value
    (bounded.py's containers past their budget are these too)."""
    from hashlib import blake2b

    return {OPAQUE: blake2b(raw, digest_size=16).hexdigest()}
