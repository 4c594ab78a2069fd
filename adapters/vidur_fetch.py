"""`srl-profile fetch vidur`: download the full Vidur measurement set at a given commit.

SimRL ships the H100 subset it uses (``simrl/cost/data/vidur``). Users who want the other models
and GPUs (A100, A40; CodeLlama-34B, Qwen-72B, InternLM-20B, Llama-3 ...) fetch GitHub's archive of
``microsoft/vidur`` at a commit::

    https://github.com/microsoft/vidur/archive/<commit>.tar.gz

and keep, in the shipped layout:

=================================================  ==================
in the archive (under its top folder)              written to
=================================================  ==================
``data/profiling/compute/<gpu>/<org>/<model>/*``   ``compute/...``
``data/profiling/network/<topology>/*``            ``network/...``
``data/processed_traces/*``                        ``traces/...``
``LICENSE``                                        ``LICENSE``
=================================================  ==================

Everything else (code, the older flat ``data/profiling/<gpu>/*.csv`` files, model configs) is
left out. The download goes to a temporary file; the tree is built in a temporary folder next
to the destination and renamed into place only when complete, with a ``NOTICE`` (source, commit,
archive SHA-256, date) and a ``source.json`` holding the same. Fetching again into a folder that
already holds the same commit does nothing; a folder holding anything else is refused.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import attrs

from simrl.cost.vidur_import import VIDUR_COMMIT

UPSTREAM = "https://github.com/microsoft/vidur"
# (prefix inside the archive's top folder, prefix in the destination)
LAYOUT = (
    ("data/profiling/compute/", "compute/"),
    ("data/profiling/network/", "network/"),
    ("data/processed_traces/", "traces/"),
    ("LICENSE", "LICENSE"),
)
_REF = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,127}$")
CHUNK = 1 << 20


class FetchError(RuntimeError):
    """The download or the archive is unusable; the message names the URL or member."""


@attrs.frozen
class FetchResult:
    dest: Path
    commit: str
    url: str
    sha256: str
    files: tuple[str, ...]
    already_present: bool = False


def archive_url(commit: str, base: str = UPSTREAM) -> str:
    if not _REF.match(commit):
        raise ValueError(f"--commit {commit!r}: expected a git commit, tag or branch name "
                         "(letters, digits, '.', '_', '-')")
    return f"{base.rstrip('/')}/archive/{commit}.tar.gz"


def map_member(name: str) -> str | None:
    """The destination path of an archive member, or None when it is not kept.

    ``name`` includes the archive's top folder (``vidur-<commit>/...``), which is dropped.
    Absolute names and ``..`` components are never kept.
    """
    parts = PurePosixPath(name).parts
    if len(parts) < 2 or name.startswith("/") or any(p in ("..", "") for p in parts):
        return None
    inner = "/".join(parts[1:])
    for src, dst in LAYOUT:
        if src.endswith("/"):
            if inner.startswith(src) and len(inner) > len(src):
                return dst + inner[len(src):]
        elif inner == src:
            return dst
    return None


def _download(url: str, into: Path, timeout: float, progress: Callable[[str], None] | None) -> str:
    """Stream ``url`` into the file ``into``; return its SHA-256."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(into, "wb") as fh:
            total = 0
            while chunk := resp.read(CHUNK):
                fh.write(chunk)
                digest.update(chunk)
                total += len(chunk)
                if progress and total % (16 * CHUNK) < CHUNK:
                    progress(f"  {total / 2**20:.0f} MiB")
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason} (does the commit exist upstream?)") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"{url}: download failed: {exc}") from exc
    return digest.hexdigest()


def _present(dest: Path, commit: str) -> FetchResult | None:
    meta = dest / "source.json"
    if not dest.exists():
        return None
    if not dest.is_dir():
        raise FetchError(f"{dest}: exists and is not a folder")
    if meta.is_file():
        try:
            info = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise FetchError(f"{meta}: unreadable ({exc}); remove {dest} and fetch again") from exc
        if info.get("commit") == commit:
            return FetchResult(dest, commit, info.get("url", ""), info.get("sha256", ""),
                               tuple(info.get("files", ())), already_present=True)
        raise FetchError(f"{dest}: holds Vidur commit {info.get('commit')!r}, not {commit!r}; "
                         "choose another folder or remove it")
    if any(dest.iterdir()):
        raise FetchError(f"{dest}: exists and is not empty (and holds no source.json of a fetch)")
    return None


def fetch_vidur(dest: str | os.PathLike, commit: str = VIDUR_COMMIT, base_url: str = UPSTREAM,
                timeout: float = 120.0, progress: Callable[[str], None] | None = None) -> FetchResult:
    """Download Vidur's measurements at ``commit`` into ``dest`` (see the module docstring)."""
    dest = Path(dest)
    url = archive_url(commit, base_url)
    done = _present(dest, commit)
    if done is not None:
        return done
    parent = dest.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".vidur-fetch-", dir=parent) as tmp:
        tmp = Path(tmp)
        archive = tmp / "archive.tar.gz"
        if progress:
            progress(f"downloading {url}")
        sha = _download(url, archive, timeout, progress)
        tree = tmp / "tree"
        tree.mkdir()
        files = []
        try:
            with tarfile.open(archive, "r:gz") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    rel = map_member(member.name)
                    if rel is None:
                        continue
                    out = tree / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    src = tar.extractfile(member)
                    if src is None:
                        continue
                    with src, open(out, "wb") as fh:
                        shutil.copyfileobj(src, fh)
                    files.append(rel)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise FetchError(f"{url}: not a readable .tar.gz archive ({exc})") from exc
        if not any(f.startswith("compute/") for f in files):
            raise FetchError(f"{url}: the archive has no data/profiling/compute/ folder; "
                             "is this a microsoft/vidur commit with profiling data?")
        files.sort()
        date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        info = {"repository": UPSTREAM, "commit": commit, "url": url, "sha256": sha, "fetched": date,
                "license": "MIT (LICENSE in this folder)", "files": files}
        (tree / "source.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        (tree / "NOTICE").write_text(
            "Vidur profiling data, fetched by `srl-profile fetch vidur`.\n\n"
            f"Source repository: {UPSTREAM}\nSource commit:     {commit}\nArchive:           {url}\n"
            f"Archive SHA-256:   {sha}\nFetched:           {date}\n\n"
            "Copyright (c) Microsoft Corporation. Licensed under the MIT License (LICENSE beside this "
            "file).\nLayout: data/profiling/{compute,network} -> compute/, network/; "
            "data/processed_traces -> traces/.\n", encoding="utf-8")
        if dest.exists():
            dest.rmdir()  # empty (checked by _present)
        os.replace(tree, dest)
    return FetchResult(dest, commit, url, sha, tuple(files))
