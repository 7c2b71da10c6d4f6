"""The key of a call: a fixed-size digest of the tool name and its canonical arguments."""

from __future__ import annotations

import json
from collections.abc import Mapping
from hashlib import blake2b
from typing import Any

DIGEST_SIZE = 16

_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def call_key(tool: str, arguments: Any, ignore_args: frozenset[str]) -> bytes | None:
    """The digest of a call, or None when its arguments cannot be serialized.

    Only the digest is kept anywhere, so memory does not grow with argument size and
    argument contents (which may hold secrets) never reach a store or a disk.
    """
    if ignore_args and isinstance(arguments, Mapping) and not ignore_args.isdisjoint(arguments):
        arguments = {k: v for k, v in arguments.items() if k not in ignore_args}
    try:
        text = _dumps(arguments)
    except (TypeError, ValueError, RecursionError):
        return None  # bytes, sets, objects, cycles: the breaker cannot judge such a call
    if not _string_keys_only(arguments):
        return None  # json would turn {1: x} into {"1": x} and merge two different calls
    return blake2b(
        f"{tool}\x00{text}".encode("utf-8", "surrogatepass"), digest_size=DIGEST_SIZE
    ).digest()


def _string_keys_only(value: Any) -> bool:
    # Runs only after json accepted the value, so there is no cycle and depth is bounded.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for k, v in item.items():
                if type(k) is not str and not isinstance(k, str):
                    return False
                if isinstance(v, (Mapping, list, tuple)):
                    stack.append(v)
        elif isinstance(item, (list, tuple)):
            stack.extend(v for v in item if isinstance(v, (Mapping, list, tuple)))
    return True
