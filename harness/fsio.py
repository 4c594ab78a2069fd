"""Durable file writes for evidence: atomic replace for whole files, fsynced appends for JSONL.

Every file a run keeps is written through here, so a crash never leaves a half-written
manifest: whole files go to a temporary sibling, are fsynced, then `os.replace`d over the
target, and the directory is fsynced; JSONL evidence is appended one line at a time with
flush + fsync, so what was recorded before a crash stays readable.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def fsync_dir(path: Path) -> None:
    """fsync a directory so that a create/rename inside it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def special_kind(path: Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file (following a symlink): "a directory",
    "a named pipe", ...; None for a regular file or a missing path (its reader names that). A pipe would
    hang a reader, a directory is no evidence file. An unreadable path's OSError propagates."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    return ("a directory" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device or other special file")


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, indent=1) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via temp file + fsync + os.replace + directory fsync."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, dumps(obj))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


class JsonlWriter:
    """Append-only JSONL file; each record is flushed and fsynced before `append` returns.

    With ``fsync_each=False`` (evidence written in bulk after a simulation, where there is no
    crash to survive mid-run) records are flushed per line and fsynced once, on `close`.
    """

    def __init__(self, path: Path, fsync_each: bool = True) -> None:
        self.path = Path(path)
        self.fsync_each = fsync_each
        existed = self.path.exists()
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        if not existed:
            fsync_dir(self.path.parent)

    def append(self, record: dict) -> bytes:
        """Write ``record`` as one line; returns the line's bytes (as they are in the file)."""
        line = json.dumps(record, sort_keys=True) + "\n"
        self._fh.write(line)
        self._fh.flush()
        if self.fsync_each:
            os.fsync(self._fh.fileno())
        return line.encode("utf-8")

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        self._fh.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def append_jsonl(path: Path, record: dict) -> None:
    with JsonlWriter(path) as w:
        w.append(record)


def read_jsonl(path: Path) -> Iterator[dict]:
    """Records of a JSONL file; a torn last line (crash mid-write) raises ValueError with its number."""
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from exc
