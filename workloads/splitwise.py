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
import math
from pathlib import Path

import numpy as np

from workloads import strictio
from workloads.sampling import Streams
from workloads.shapes import assemble, synthetic_rewards
from workloads.types import Workload

COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
MAX_TOKENS = 2**31 - 1


def _read_rows(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(prefill, decode) int64 arrays; ValueError naming file, line and column on a bad row.

    Strict: UTF-8 text, exactly the three columns, whole numbers written as integers (``12.0``
    and ``1e3`` are refused: a token count is never fractional), at most 2**31 tokens a request.
    """
    def fail(line: int, field: str | None, msg: str) -> ValueError:
        return ValueError(f"{path}{':' + str(line) if line else ''}: {field + ': ' if field else ''}{msg}")

    text = strictio.read_text(path, fail)
    prefill, decode = [], []
    reader = csv.reader(text)
    try:
        head = next(reader, None)
        if head is None:
            raise fail(1, None, f"empty file; expected the header {','.join(COLUMNS)}")
        head = [h.strip() for h in head]
        if tuple(head) != COLUMNS:
            unknown = [h for h in head if h not in COLUMNS]
            hint = strictio.did_you_mean(unknown[0], COLUMNS) if unknown else ""
            raise fail(1, None, f"expected header {','.join(COLUMNS)}, got {','.join(head)}"
                                f"{'; unknown column ' + repr(unknown[0]) + hint if unknown else ''}")
        for row in reader:
            if not row or not "".join(row).strip():
                continue
            line = reader.line_num
            if len(row) != len(COLUMNS):
                raise fail(line, None, f"expected {len(COLUMNS)} columns ({','.join(COLUMNS)}), got {len(row)}")
            try:
                arrived = float(row[0])
            except ValueError:
                arrived = math.nan
            if not math.isfinite(arrived):
                raise fail(line, COLUMNS[0], f"expected a finite number of seconds, got {row[0]!r}")
            for col, out in ((1, prefill), (2, decode)):
                cell = row[col].strip()
                if not cell.isdigit() or not cell.isascii():
                    raise fail(line, COLUMNS[col], f"expected an integer >= 1, got {row[col]!r}")
                if len(cell) > 10 or int(cell) > MAX_TOKENS:
                    raise fail(line, COLUMNS[col], f"expected at most {MAX_TOKENS} tokens, got {cell}")
                if int(cell) < 1:
                    raise fail(line, COLUMNS[col], f"expected an integer >= 1, got {row[col]!r}")
                out.append(int(cell))
    except csv.Error as exc:
        raise fail(reader.line_num, None, f"not valid CSV ({exc})") from None
    return np.asarray(prefill, np.int64), np.asarray(decode, np.int64)


def import_splitwise(csv_path, group_size: int = 1, seed: int = 0, max_groups: int | None = None,
                     max_model_len: int | None = None, name: str | None = None) -> Workload:
    """A `Workload` of single-call groups from a Splitwise CSV.

    ``max_model_len`` (tokens), when given, drops rows whose prompt alone does not fit and clips
    the other completions to ``max_model_len - prompt``. ``max_groups`` keeps the first groups.
    """
    path = Path(csv_path)
    for key, value, low in (("group_size", group_size, 1), ("max_groups", max_groups, 1),
                            ("max_model_len", max_model_len, 2), ("seed", seed, 0)):
        if value is not None and (type(value) is not int or not low <= value <= strictio.INT_MAX):
            raise ValueError(f"{key} must be an integer >= {low}, got {value!r}")
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
