"""Atomic file writes and staged directories.

`atomic_write`: a temporary sibling, fsync, then rename over the target. A reader never sees a
half-written file, and a crash leaves the old file (or none) in place.

`staged_dir`: a whole directory (a run: config, telemetry, report, plots) is built in a hidden
sibling and renamed into place when complete, so a directory's files always belong to one run.
A rerun into an existing directory replaces it whole: the previous run's telemetry or plots can
never sit beside the new report. On an exception, Ctrl-C or SIGTERM (which the CLI app turns
into an exception) the temporary files are removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; written files are ordinary files
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def replace_dir(staged: Path, final: Path) -> None:
    """Move the complete directory ``staged`` to ``final``, replacing what was there.

    POSIX has no atomic directory exchange; the old directory is first renamed aside (so
    ``final`` is never a mix of two runs), the new one renamed in, and the old one deleted.
    """
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise FileExistsError(17, "exists and is not a directory; remove it or choose another name", str(final))
    old = None
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
        os.rename(final, old / final.name)
    try:
        os.rename(staged, final)
    except BaseException:
        if old is not None:
            os.rename(old / final.name, final)  # put the previous run back
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a hidden temporary directory beside ``final``; on success it becomes ``final``."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)  # mkdtemp creates 0700; a run directory is an ordinary directory
        replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
