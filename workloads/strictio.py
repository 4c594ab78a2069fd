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
    close = difflib.get_close_matches(str(name), sorted(map(str, known)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


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


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise StrictInputError(f"duplicate key {k!r} in one object (JSON readers disagree on which "
                                       f"value wins; keep one)", k)
            seen.add(k)
    return d


def _constant(name: str):
    raise StrictInputError(f"{name} is not a finite number (JSON has no NaN or Infinity; write a number "
                           f"or null where the format allows it)")


def _float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise StrictInputError(f"number {text} overflows a 64-bit float")
    return x


def _int(text: str) -> int:
    if len(text) > 20:
        raise StrictInputError(f"integer {text[:12]}... ({len(text)} digits) is outside the 64-bit range")
    x = int(text)
    if not INT_MIN <= x <= INT_MAX:
        raise StrictInputError(f"integer {text} is outside the 64-bit range [-2**63, 2**63 - 1]")
    return x


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs_hook, parse_constant=_constant, parse_float=_float,
                            parse_int=_int)


def loads(text: str) -> Any:
    """`json.loads` with duplicate keys, NaN/Infinity, float overflow and huge integers rejected.

    Raises `json.JSONDecodeError` for syntax errors (``msg``, ``colno``) and `StrictInputError`
    for the rest.
    """
    return _DECODER.decode(text)


def decode_line(raw: bytes, line: int) -> str:
    """One line of bytes as text; `StrictInputError` naming the column of the first bad byte."""
    if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark
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
