"""The strict reading layer for every format the CLIs read: JSON (re-exported from
`workloads.strictio`, the bottom layer) and YAML (here: `workloads` does not read YAML).

YAML is read with PyYAML's safe loader plus three refusals the plain loader lacks:

- duplicate keys in one mapping (PyYAML keeps the last one silently), named with both lines;
- bytes that are not UTF-8, named with line and column;
- aliases (``*name``): a config never needs them, and they make "billion laughs" documents;
- ``.nan`` and numbers that overflow a float (``1e400``): no field accepts NaN, and an overflow
  would otherwise become ``.inf``, which some fields (time horizons) read as "no limit". A
  written ``.inf`` is kept; the typed layer refuses it where no limit is meaningless.

Values are then checked by type where they are structured (`simrl.config`): exact types,
finite numbers and 64-bit integers.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from workloads.strictio import (
    INT_MAX,
    INT_MIN,
    StrictInputError,
    check_fields,
    decode_line,
    did_you_mean,
    json_lines,
    load_json_file,
    loads,
    parse_json_line,
    read_text,
    unknown_field_message,
)

__all__ = [
    "INT_MAX", "INT_MIN", "StrictInputError", "YamlInputError", "YamlNumberError", "check_fields", "decode_line",
    "did_you_mean",
    "json_lines", "load_json_file", "load_yaml_file", "load_yaml_text", "loads", "parse_json_line",
    "read_text", "read_utf8", "unknown_field_message", "yaml_key_lines",
]


class YamlInputError(ValueError):
    """A YAML document that cannot be read; ``line`` is 1-based (0: the whole file)."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.message, self.line = message, line


class YamlNumberError(YamlInputError):
    """A number YAML can parse but no field accepts: ``.nan`` or a float overflow (``1e400``)."""


_INF_SPELLING = re.compile(r"[-+]?\.(?:inf|Inf|INF)")


def _number_error(text: str, line: int, key: str) -> YamlNumberError | None:
    """The error for a YAML float scalar that is NaN or overflows (a written ``.inf`` is kept)."""
    value = float(text.replace("_", "").lower().replace(".nan", "nan").replace(".inf", "inf"))
    if math.isfinite(value):
        return None
    at = f"{key}: " if key else ""
    if math.isnan(value):
        return YamlNumberError(f"{at}{text} is not a finite number (NaN is accepted nowhere; write a number)", line)
    if _INF_SPELLING.fullmatch(text.strip()):
        return None
    return YamlNumberError(f"{at}number {text} overflows a 64-bit float (largest: 1.8e308); write a finite "
                           f"number, or .inf where the field means 'no limit'", line)


def _check_numbers(node, key: str) -> None:
    """Walk a composed document before it is constructed: the first NaN or overflowing float,
    named by its key path (``run.time_horizon_s``, ``axes[0].grid[2]``) and line."""
    if isinstance(node, yaml.MappingNode):
        for k, val in node.value:
            name = str(k.value) if isinstance(k, yaml.ScalarNode) else "?"
            _check_numbers(val, f"{key}.{name}" if key else name)
    elif isinstance(node, yaml.SequenceNode):
        for i, val in enumerate(node.value):
            _check_numbers(val, f"{key}[{i}]")
    elif isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:float":
        try:
            err = _number_error(node.value, node.start_mark.line + 1, key)
        except ValueError:
            return  # not a number PyYAML's own constructor reads either: its error stands
        if err is not None:
            raise err


class _StrictLoader(yaml.SafeLoader):
    def construct_document(self, node):
        _check_numbers(node, "")
        return super().construct_document(node)

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlInputError(f"alias *{event.anchor} is not supported (write the value out)",
                                 event.start_mark.line + 1)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise YamlInputError("a mapping key must be a plain value", key_node.start_mark.line + 1) from None
            line = key_node.start_mark.line + 1
            if key in seen:
                raise YamlInputError(f"duplicate key {key!r} (repeated on line {line}, first on line {seen[key]}); "
                                     f"keep one", line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_yaml_map)

# YAML 1.1 (PyYAML) reads ``1e4`` as a string; YAML 1.2 and JSON read it as a number, as users
# expect. Floats are resolved with the YAML 1.2 core-schema pattern instead.
_StrictLoader.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:float"]
                                         for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*\.[0-9_]*|[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |[-+]?(?:[0-9][0-9_]*)?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                  |[-+]?[0-9][0-9_]*\.[0-9_]*
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def load_yaml_text(text: str) -> Any:
    """Parse one YAML document strictly; `YamlInputError` with the line on any problem."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except YamlInputError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        col = f" column {mark.column + 1}" if mark is not None else ""
        raise YamlInputError(f"not valid YAML ({exc.problem or exc.context}{' at' + col if col else ''})",
                             line) from None
    except yaml.YAMLError as exc:
        raise YamlInputError(f"not valid YAML ({exc})") from None
    except RecursionError:
        raise YamlInputError("YAML nested too deeply") from None


def read_utf8(path) -> str:
    """A text file's contents; `YamlInputError` naming the line of a non-UTF-8 or NUL byte."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except IsADirectoryError:
        raise YamlInputError("is a directory, expected a file") from None
    except OSError as exc:
        raise YamlInputError(f"cannot read ({exc.strerror or exc})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if b"\x00" in raw:
        raise YamlInputError("contains a NUL byte; is this a binary file? expected UTF-8 text",
                             raw[:raw.index(b"\x00")].count(b"\n") + 1)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise YamlInputError(f"not UTF-8 text (byte 0x{raw[exc.start:exc.start + 1].hex()} at column {col}); "
                             f"is this a binary file? save it as UTF-8 text", line) from None
    return text


def load_yaml_file(path) -> Any:
    """Read ``path`` as UTF-8 and parse it strictly; `YamlInputError` naming the line."""
    return load_yaml_text(read_utf8(path))


def yaml_key_lines(text: str) -> dict[str, int]:
    """``{"a.b.c": line}`` for every mapping key of a YAML document (1-based lines), for messages."""
    try:
        root = yaml.compose(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, YamlInputError, RecursionError):
        return {}
    out: dict[str, int] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, val in node.value:
                if isinstance(k, yaml.ScalarNode):
                    path = f"{prefix}.{k.value}" if prefix else str(k.value)
                    out.setdefault(path, k.start_mark.line + 1)
                    walk(val, path)

    walk(root, "")
    return out
