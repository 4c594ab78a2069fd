"""Where the workplace's shared real data lives: $SIMRL_SHARED_DATA, else ../shared/data."""

import os
from pathlib import Path


def shared_data() -> Path:
    env = os.environ.get("SIMRL_SHARED_DATA")
    repo = Path(__file__).resolve().parents[1]
    for cand in (env, repo.parent / "shared" / "data", Path("/work/shared/data")):
        if cand and Path(cand).is_dir():
            return Path(cand)
    return repo.parent / "shared" / "data"
