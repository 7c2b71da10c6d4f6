"""JSON on the decision path through CPython's C accelerator (`_json`), without `json`.

Importing the `json` package imports `re` (and with it `enum`, `functools`,
`collections`): about 4 ms that a command hook, a new process for every tool call, would
pay on each call. These functions call the very C functions `json` itself uses, with
`json.dumps`'s own arguments, so the output is byte for byte the same
(tests/test_cjson.py checks it over generated values). Anything unusual (an error, a
byte-order mark, a Python without `_json`) goes to the `json` package itself, so
behaviour and error messages are exactly `json`'s.
"""

from __future__ import annotations

from _thread import _local

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_c: Any  # the C module, used untyped: its stubs describe json's wrappers, not it
try:
    import _json as _c
except ImportError:  # pragma: no cover - not CPython
    _c = None


def _unserializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _DecodeContext:
    """The attributes `json.scanner.make_scanner` reads from a `JSONDecoder`."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


def _encoder(markers: dict[int, Any] | None) -> Any:
    """json's C encoder with `json.dumps(sort_keys=True, separators=(",", ":"))`'s
    arguments; `markers` is its cycle check (None: none)."""
    return _c.make_encoder(
        markers, _unserializable, _c.encode_basestring_ascii, None, ":", ",", True, False, True
    )


_scan = _c.make_scanner(_DecodeContext()) if _c is not None else None
_unchecked = _encoder(None) if _c is not None else None
_per_thread = _local()
_WHITESPACE = " \t\n\r"


def canonical(value: Any) -> str:
    """`json.dumps(value, sort_keys=True, separators=(",", ":"))`.

    Raises TypeError / ValueError / RecursionError exactly where that call would.
    """
    if _c is None:  # pragma: no cover - not CPython
        import json

        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    # One encoder per thread, reused: building one costs a quarter of encoding a small
    # call. Its cycle markers are empty again after every value it finishes; one that
    # failed part-way may leave some behind, so it is replaced.
    encode = getattr(_per_thread, "encode", None) or _new_encoder()
    try:
        text: str = "".join(encode(value, 0))
    except BaseException:
        _per_thread.encode = None
        raise
    return text


def canonical_unchecked(value: Any) -> str:
    """`canonical` without json's cycle check: a cycle raises RecursionError, not
    ValueError. Its encoder keeps no state (the check is what does), so every thread
    shares one, and a call's key, which treats both errors alike, is a fifth cheaper."""
    if _unchecked is None:  # pragma: no cover - not CPython
        import json

        return json.dumps(value, sort_keys=True, separators=(",", ":"), check_circular=False)
    return "".join(_unchecked(value, 0))


def _new_encoder() -> Any:
    _per_thread.encode = _encoder({})
    return _per_thread.encode


def loads(data: str | bytes) -> Any:
    """`json.loads(data)`."""
    if _scan is not None:
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else data
            start = len(text) - len(text.lstrip(_WHITESPACE))
            value, end = _scan(text, start)
            if not text[end:].strip(_WHITESPACE):
                return value
        except Exception:  # json below raises the proper error (or, for UTF-16, succeeds)
            pass
    import json

    return json.loads(data)
