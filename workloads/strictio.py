"""Strict JSON reading shared by every format the project reads (traces, collected logs,
observations, real runs, fitted artifacts): the one place that decides what a valid JSON value is.

It lives in `workloads` because `workloads` is the bottom layer (it imports nothing else of the
repository); `simrl.strictio` re-exports it and adds the YAML loader. What it rejects, each
with the file, line and (where known) field, and what to do instead:

- bytes that are not UTF-8 (a binary file, a Latin-1 export): file, line and column;
- duplicate keys in one JSON object (Python's `json` keeps the last one silently);
- ``NaN``, ``Infinity`` and numbers that overflow a float (``1e999``);
- integers outside the signed 64-bit range (numpy columns, counters and seeds are int64);
- unknown fields, with a "did you mean" suggestion (`unknown_field_message`).

The functions raise `StrictInputError`; each format's reader converts it into its own error
class with `fail(line, field, message)` so callers keep catching what they caught before.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

INT_MIN, INT_MAX = -(2**63), 2**63 - 1


class StrictInputError(ValueError):
    """A value the strict layer refuses; ``field`` is the key it was found under, if known."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message, self.field = message, field


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest known name, or ``""`` when none is close."""
    known = sorted(map(str, known))
    lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(str(name).lower(), list(lower), n=1, cutoff=0.5)
    return f" (did you mean {lower[close[0]]!r}?)" if close else ""


def unknown_field_message(name: str, known: Iterable[str]) -> str:
    known = sorted(map(str, known))
    hint = did_you_mean(name, known)
    return f"unknown field {name!r}{hint}; known fields: {', '.join(known)}"


def check_fields(obj: dict, known: Iterable[str], prefix: str = "") -> None:
    """Raise `StrictInputError` naming the first key of ``obj`` that is not in ``known``."""
    known = set(known)
    extra = sorted(set(obj) - known, key=str)
    if extra:
        raise StrictInputError(unknown_field_message(extra[0], known), prefix + str(extra[0]))


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON ``object_pairs_hook``: the object as a dict, `StrictInputError` on a repeated key."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise StrictInputError(f"duplicate key {k!r} in one object (JSON readers disagree on which "
                                       f"value wins; keep one)", k)
            seen.add(k)
    return d


class _Bad:
    """A number the strict layer refuses, kept in place while locating it (its key path)."""

    def __init__(self, message: str):
        self.message = message


def _bad_constant(name: str) -> _Bad:
    return _Bad(f"{name} is not a finite number (JSON has no NaN or Infinity; write a number or null "
                f"where the format allows it)")


def _bad_float(text: str) -> float | _Bad:
    x = float(text)
    return x if math.isfinite(x) else _Bad(f"number {text} overflows a 64-bit float")


def _bad_int(text: str) -> int | _Bad:
    if len(text) > 20:
        return _Bad(f"integer {text[:12]}... ({len(text)} digits) is outside the 64-bit range")
    x = int(text)
    return x if INT_MIN <= x <= INT_MAX else _Bad(f"integer {text} is outside the 64-bit range "
                                                  f"[-2**63, 2**63 - 1]")


def _find_bad(value: Any, path: str = "") -> tuple[str, _Bad] | None:
    if isinstance(value, _Bad):
        return path, value
    if isinstance(value, dict):
        for k, val in value.items():
            hit = _find_bad(val, f"{path}.{k}" if path else str(k))
            if hit:
                return hit
    elif isinstance(value, list):
        for i, val in enumerate(value):
            hit = _find_bad(val, f"{path}[{i}]")
            if hit:
                return hit
    return None


def _constant(name: str):
    raise StrictInputError(_bad_constant(name).message)


def _float(text: str) -> float:
    x = _bad_float(text)
    if isinstance(x, _Bad):
        raise StrictInputError(x.message)
    return x


def _int(text: str) -> int:
    x = _bad_int(text)
    if isinstance(x, _Bad):
        raise StrictInputError(x.message)
    return x


_STRICT = json.JSONDecoder(object_pairs_hook=unique_pairs, parse_constant=_constant, parse_float=_float,
                           parse_int=_int)
_FAST = json.JSONDecoder(object_pairs_hook=unique_pairs, parse_constant=_constant)
_LOCATE = json.JSONDecoder(object_pairs_hook=unique_pairs, parse_constant=_bad_constant, parse_float=_bad_float,
                           parse_int=_bad_int)
# A number can leave the 64-bit / finite range only with a run of 19+ digits or a 3-digit exponent;
# digits are mapped to "0" and the runs found by substring search (a regex is 6x slower here).
_DIGITS = str.maketrans("123456789", "000000000")
_LONG = ("0" * 19, "e000", "e+000", "e-000", "E000", "E+000", "E-000")


def _may_overflow(text: str) -> bool:
    z = text.translate(_DIGITS)
    return any(p in z for p in _LONG)


def loads(text: str) -> Any:
    """`json.loads` with duplicate keys, NaN/Infinity, float overflow and huge integers rejected.

    Raises `json.JSONDecodeError` for syntax errors (``msg``, ``colno``) and `StrictInputError`
    for the rest. Numbers are checked one by one only when the text has a number long enough to
    overflow (a per-number callback would slow trace reading by half).
    """
    try:
        return (_STRICT if _may_overflow(text) else _FAST).decode(text)
    except StrictInputError as exc:
        if exc.field is not None:
            raise
        hit = _find_bad(_LOCATE.decode(text))  # decode again, keeping bad numbers, to name their key
        if hit is None:
            raise
        raise StrictInputError(hit[1].message, hit[0] or None) from None


def decode_line(raw: bytes, line: int) -> str:
    """One line of bytes as text; `StrictInputError` naming the column of the first bad byte."""
    if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise StrictInputError(f"contains a NUL byte at column {nul + 1}; is this a binary file? expected UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start:exc.start + 1].hex()
        raise StrictInputError(f"not UTF-8 text (byte 0x{bad} at column {exc.start + 1}); "
                               f"is this a binary file? save it as UTF-8 text") from None


Fail = Callable[[int, str | None, str], Exception]


def read_text(path, fail: Fail) -> list[str]:
    """The lines of a UTF-8 text file (no line ends); errors through ``fail(line, field, message)``.

    ``fail(0, None, message)`` for a file that cannot be opened.
    """
    try:
        with open(path, "rb") as fh:
            raw_lines = fh.read().splitlines()
    except OSError as exc:
        raise fail(0, None, f"cannot read ({exc.strerror or exc})") from None
    out = []
    for n, raw in enumerate(raw_lines, 1):
        try:
            out.append(decode_line(raw, n))
        except StrictInputError as exc:
            raise fail(n, None, exc.message) from None
    return out


def parse_json_line(text: str, line: int, fail: Fail) -> Any:
    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        raise fail(line, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except StrictInputError as exc:
        raise fail(line, exc.field, exc.message) from None
    except RecursionError:
        raise fail(line, None, "JSON nested too deeply") from None


def json_lines(path, fail: Fail) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for every non-blank line of a JSONL file, strictly decoded.

    The file is read line by line; every error goes through ``fail(line, field, message)``
    (line 0: the file as a whole).
    """
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise fail(0, None, f"cannot open: {exc.strerror or exc}") from None
    with fh:
        try:
            for n, raw in enumerate(fh, 1):
                try:
                    text = decode_line(raw, n)
                except StrictInputError as exc:
                    raise fail(n, None, exc.message) from None
                if not text.strip():
                    continue
                yield n, parse_json_line(text, n, fail)
        except IsADirectoryError:
            raise fail(0, None, "is a directory, expected a JSONL file") from None


def load_json_file(path, fail: Fail) -> Any:
    """One JSON document from a file, strictly decoded; line numbers come from the decoder."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise fail(0, None, f"cannot read ({exc.strerror or exc})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if b"\x00" in raw:
        raise fail(raw[:raw.index(b"\x00")].count(b"\n") + 1, None,
                   "contains a NUL byte; is this a binary file? expected UTF-8 text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise fail(line, None, f"not UTF-8 text (byte 0x{raw[exc.start:exc.start + 1].hex()}); "
                               f"is this a binary file? save it as UTF-8 text") from None
    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        raise fail(exc.lineno, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except StrictInputError as exc:
        raise fail(0, exc.field, exc.message) from None
    except RecursionError:
        raise fail(0, None, "JSON nested too deeply") from None
