"""The model at the pinned revision, as a run-local symlink the backends load from.

Neither SkyRL (``trainer.policy.model.path``) nor ART (``TrainableModel.base_model``) takes a
revision at the pinned sources, so the revision is enforced by path: the controller resolves the
Hugging Face cache snapshot of `pins.MODEL` at `pins.MODEL_REVISION`
(``$HF_HOME/hub/models--<org>--<name>/snapshots/<revision>``), refuses to start if it is missing,
links it as ``<run dir>/model``, and the drivers load that path. The manifest records the link,
its target and the revision; validation checks the link still names the pinned revision.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness import pins as P
from harness.errors import BenchError

LINK_NAME = "model"


def hf_home(hf_cache: str | None) -> Path:
    if hf_cache:
        return Path(hf_cache)
    env = os.environ.get("HF_HOME")
    return Path(env) if env else Path.home() / ".cache" / "huggingface"


def snapshot_dir(hf_cache: str | None, model: str = P.MODEL, revision: str = P.MODEL_REVISION) -> Path:
    return hf_home(hf_cache) / "hub" / f"models--{model.replace('/', '--')}" / "snapshots" / revision


def link(run_dir: Path, hf_cache: str | None) -> dict:
    """Make ``run_dir/model`` point at the pinned snapshot; a missing snapshot is a clear error."""
    snap = snapshot_dir(hf_cache)
    if not (snap / "config.json").is_file():
        raise BenchError(f"model snapshot {snap} is missing (no config.json): fetch {P.MODEL} at the pinned "
                         f"revision first, e.g. `huggingface-cli download {P.MODEL} --revision {P.MODEL_REVISION}` "
                         "with HF_HOME set to the --hf-cache directory")
    dest = Path(run_dir) / LINK_NAME
    dest.symlink_to(snap.resolve(), target_is_directory=True)
    return {"link": str(dest), "target": str(snap.resolve()), "revision": P.MODEL_REVISION, "model": P.MODEL}


def check(run_dir: Path, record: dict | None) -> list[str]:
    """Problems with a run's model link (none when the run recorded no link, i.e. the sim runtime)."""
    if not record:
        return []
    out = []
    if record.get("revision") != P.MODEL_REVISION:
        out.append(f"model revision {record.get('revision')!r} is not the pinned {P.MODEL_REVISION}")
    if record.get("model") != P.MODEL:
        out.append(f"model snapshot of {record.get('model')!r}, not the pinned {P.MODEL}")
    dest = Path(run_dir) / LINK_NAME
    target = Path(str(record.get("target")))
    want_tail = ("models--" + P.MODEL.replace("/", "--"), "snapshots", P.MODEL_REVISION)
    if target.parts[-3:] != want_tail:
        out.append(f"model.snapshot.target {target} is not an HF cache snapshot {'/'.join(want_tail)}")
    if not dest.is_symlink():
        out.append(f"{dest} is not a symlink to the model snapshot")
    elif Path(os.readlink(dest)).name != P.MODEL_REVISION:
        out.append(f"{dest} points at {os.readlink(dest)}, not the snapshot of revision {P.MODEL_REVISION}")
    elif os.readlink(dest) != str(target):
        out.append(f"{dest} points at {os.readlink(dest)}, not at the snapshot the run recorded ({target})")
    return out
