"""run.log: timestamped lines, each flushed and fsynced, optionally echoed to the terminal."""

from __future__ import annotations

import os
import time
from pathlib import Path


class RunLog:
    def __init__(self, path: Path, echo=None) -> None:
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._echo = echo

    def write(self, level: str, msg: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for line in msg.splitlines() or [""]:
            self._fh.write(f"{stamp} {level} {line}\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        if self._echo and level != "DEBUG":
            self._echo(msg)

    def info(self, msg: str) -> None:
        self.write("INFO", msg)

    def error(self, msg: str) -> None:
        self.write("ERROR", msg)

    def __call__(self, msg: str) -> None:
        self.info(msg)

    def close(self) -> None:
        self._fh.close()
