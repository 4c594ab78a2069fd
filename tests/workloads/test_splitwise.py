"""Splitwise CSV import on the real Vidur traces."""


import numpy as np
import pytest
from simhelpers import VIDUR_DATA

from workloads.splitwise import import_splitwise

TRACES = VIDUR_DATA / "traces"
CONV = TRACES / "splitwise_conv.csv"


def test_import_conv_rows_become_trajectories():
    w = import_splitwise(CONV, group_size=4, seed=1)
    rows = np.loadtxt(CONV, delimiter=",", skiprows=1)
    assert w.problems() == [] and w.n_groups == len(rows) // 4 and w.group_size(0) == 4
    assert np.array_equal(w.call_prompt_tokens, rows[: w.n_trajectories, 1].astype(int))
    assert np.array_equal(w.call_completion_tokens, rows[: w.n_trajectories, 2].astype(int))
    assert not w.group_shared_prompt_tokens.any()
    assert np.all(w.traj_reward.reshape(-1, 4).std(axis=1) > 0)
    again = import_splitwise(CONV, group_size=4, seed=1)
    assert again.schedule_sha256() == w.schedule_sha256() and np.array_equal(again.traj_reward, w.traj_reward)
    assert not np.array_equal(import_splitwise(CONV, group_size=4, seed=2).traj_reward, w.traj_reward)


def test_import_code_with_limits():
    w = import_splitwise(TRACES / "splitwise_code.csv", max_groups=100, max_model_len=4096)
    assert w.n_groups == 100 and w.group_size(0) == 1
    assert np.all(w.call_prompt_tokens + w.call_completion_tokens <= 4096)
    assert w.knobs["dropped_rows"] > 0


def test_bad_csv_names_line_and_column(tmp_path):
    bad = tmp_path / "s.csv"
    bad.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n0.1,abc,5\n")
    with pytest.raises(ValueError, match=r"s.csv:3: num_prefill_tokens: expected an integer"):
        import_splitwise(bad)
    bad.write_text("t,a,b\n0,1,1\n")
    with pytest.raises(ValueError, match="expected header"):
        import_splitwise(bad)
    bad.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n")
    with pytest.raises(ValueError, match="cannot fill one group of 2"):
        import_splitwise(bad, group_size=2)
