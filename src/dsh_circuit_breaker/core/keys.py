"""The key of a call: a fixed-size digest of the tool name and its canonical arguments."""

from __future__ import annotations

from .cjson import canonical_unchecked

try:  # hashlib loads OpenSSL first; the builtin module alone is much cheaper to import
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - CPython always has it
    from hashlib import blake2b

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DIGEST_SIZE = 16


def call_key(tool: str, arguments: Any, ignore_args: frozenset[str]) -> bytes | None:
    """The digest of a call, or None when its arguments cannot be serialized.

    Only the digest is kept anywhere, so memory does not grow with argument size and
    argument contents (which may hold secrets) never reach a store or a disk.
    """
    if ignore_args and isinstance(arguments, dict) and not ignore_args.isdisjoint(arguments):
        arguments = {k: v for k, v in arguments.items() if k not in ignore_args}
    try:
        text = canonical_unchecked(arguments)  # a cycle: RecursionError
    except (TypeError, ValueError, RecursionError):
        return None  # bytes, sets, objects, cycles: the breaker cannot judge such a call
    if not _string_keys_only(arguments, text):
        return None  # json would turn {1: x} into {"1": x} and merge two different calls
    data = f"{tool}\x00{text}".encode("utf-8", "surrogatepass")
    return blake2b(data, digest_size=DIGEST_SIZE).digest()  # `digest`, one call fewer


def digest(data: bytes, size: int) -> bytes:
    """The `size`-byte BLAKE2b digest of `data`: all that is kept of a call or a result."""
    return blake2b(data, digest_size=size).digest()


def _string_keys_only(value: Any, text: str) -> bool:
    # Runs only after json accepted the value, so there is no cycle, depth is bounded, and
    # every container is a dict, list or tuple (json serializes no other kind).
    if type(value) is dict:  # a subclass may iterate otherwise than json reads it: walked
        try:
            "".join(value)  # in C: a TypeError at the first key that is not a string
        except TypeError:
            return False
        if text.find("{", 1) < 0:
            return True  # no object inside it (a brace in a string only costs the walk)
    elif "{" not in text and not isinstance(value, dict):
        return True  # no object anywhere, so no key at all
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    return False
                if isinstance(v, (dict, list, tuple)):
                    stack.append(v)
        elif isinstance(item, (list, tuple)):
            stack.extend(v for v in item if isinstance(v, (dict, list, tuple)))
    return True
