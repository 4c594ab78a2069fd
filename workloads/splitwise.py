"""Import the Splitwise production request traces (Vidur's data/traces/splitwise_*.csv).

Each CSV row (``arrived_at,num_prefill_tokens,num_decode_tokens``) becomes one single-call
trajectory: prompt = prefill tokens, completion = decode tokens. Consecutive rows form groups of
``group_size``; the rows are different requests, so the group shares no prompt tokens
(``shared_prompt_tokens = 0``), and trailing rows that do not fill a group are left out. Arrival
times are dropped: an RL rollout loop is closed (the trainer's admission decides when a group
starts), not an open arrival process. Rewards are synthetic 0/1 drawn from the seed, varying
inside every group of two or more.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from workloads.sampling import Streams
from workloads.shapes import assemble, synthetic_rewards
from workloads.types import Workload

COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")


def _read_rows(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(prefill, decode) int64 arrays; ValueError naming file, line and column on a bad row."""
    prefill, decode = [], []
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        head = next(reader, None)
        if head is None or tuple(h.strip() for h in head[:3]) != COLUMNS:
            raise ValueError(f"{path}:1: expected header {','.join(COLUMNS)}, got {head!r}")
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            for col, out in ((1, prefill), (2, decode)):
                try:
                    value = float(row[col])
                except (IndexError, ValueError):
                    raise ValueError(f"{path}:{line}: {COLUMNS[col]}: expected an integer, got "
                                     f"{row[col] if col < len(row) else 'nothing'!r}") from None
                if not value.is_integer() or value < 1:
                    raise ValueError(f"{path}:{line}: {COLUMNS[col]}: expected an integer >= 1, got {row[col]!r}")
                out.append(int(value))
    return np.asarray(prefill, np.int64), np.asarray(decode, np.int64)


def import_splitwise(csv_path, group_size: int = 1, seed: int = 0, max_groups: int | None = None,
                     max_model_len: int | None = None, name: str | None = None) -> Workload:
    """A `Workload` of single-call groups from a Splitwise CSV.

    ``max_model_len`` (tokens), when given, drops rows whose prompt alone does not fit and clips
    the other completions to ``max_model_len - prompt``. ``max_groups`` keeps the first groups.
    """
    path = Path(csv_path)
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    prefill, decode = _read_rows(path)
    rows = len(prefill)
    if max_model_len is not None:
        keep = prefill < max_model_len
        prefill, decode = prefill[keep], np.minimum(decode[keep], max_model_len - prefill[keep])
    groups = len(prefill) // group_size
    if max_groups is not None:
        groups = min(groups, max_groups)
    if groups < 1:
        raise ValueError(f"{path}: {len(prefill)} usable rows cannot fill one group of {group_size}")
    T = groups * group_size
    prompt, completion = prefill[:T, None], decode[:T, None]
    label = name or f"splitwise_{path.stem.removeprefix('splitwise_')}"
    st = Streams(seed, label)
    pass_rate = 0.2 + 0.6 * st.uniform("pass_rate", np.arange(groups))
    reward = synthetic_rewards(st, pass_rate, group_size, zero_variance_fraction=0.0)
    knobs = {"source": path.name, "group_size": group_size, "rows": rows, "dropped_rows": rows - len(prefill)}
    if max_model_len is not None:
        knobs["max_model_len"] = max_model_len
    return assemble(label, seed, knobs, group_size, np.zeros(groups, np.int64), prompt, prompt.copy(),
                    completion, np.zeros((T, 1)), np.zeros((T, 1), bool), reward)
