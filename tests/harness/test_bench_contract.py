"""The measurement contract against hand-computed evidence."""

from __future__ import annotations

import pytest

from harness import contract


def test_merge_intervals_union():
    assert contract.merge_intervals([(5, 7), (0, 2), (1, 3), (3, 4), (6, 6)]) == [(0, 4), (5, 7)]
    # two ranks fully concurrent count once, not twice
    assert contract.union_length([(0, 10), (0, 10)]) == 10
    assert contract.union_length([(0, 4), (2, 6), (8, 9)]) == 7


def evidence():
    c = {k: 10.0 * k for k in range(1, 16)} | {16: 160.0, 17: 172.0, 18: 180.0, 19: 195.0, 20: 200.0}
    ivs = {16: {"0": [[151, 155]], "1": [[153, 158]]},
           17: {"0": [[161, 165], [166, 168]], "1": [[161, 164]]}}
    for k in (18, 19, 20):
        x = c[k - 1]
        ivs[k] = {"0": [[x + 1, x + 3]], "1": [[x + 1, x + 3]]}
    updates = [{"k": k, "d_k": c[k] - 9, "c_k": c[k], "tokens": 100 * (k - 15) if k > 15 else 1,
                "groups": 4, "trajectories": 16, "rank_intervals": ivs.get(k, {}), "rank_intervals_native": True,
                "staleness": [0, 1, 5, 2] if k == 20 else [0]} for k in range(1, 21)]
    turns = [{"finish": f, "completion_tokens": n, "group": 0, "trajectory": 0}
             for f, n in ((150.0, 1000), (150.5, 10), (200.0, 20), (200.1, 1000), (None, 1000))]
    return updates, turns


def test_headline_rates_by_hand():
    updates, turns = evidence()
    h = contract.window_rates(updates, turns, 16, 20)
    assert h["window_s"] == 50.0
    assert h["updates_per_hour"] == pytest.approx(360.0)
    assert h["seconds_per_update"] == pytest.approx(10.0)
    assert h["accepted_trained_tokens_per_s"] == pytest.approx(1500 / 50)
    assert h["trained_groups_per_s"] == pytest.approx(20 / 50)
    assert h["trained_trajectories_per_s"] == pytest.approx(80 / 50)
    assert h["sampled_tokens_per_s"] == pytest.approx(30 / 50)  # (c15, c20]: 150 excluded, 200 included
    assert h["trainer_busy_s"] == pytest.approx(7 + 6 + 2 + 2 + 2)
    assert h["trainer_tokens_per_s"] == pytest.approx(1500 / 19)
    assert h["trainer_duty"] == pytest.approx(19 / 50)
    assert h["rank_skew_max_s"] == pytest.approx(2.5)  # update 16: 7 - median(4, 5)
    assert h["rank_skew_mean_s"] == pytest.approx((2.5 + 2.0) / 5)


def test_trainer_rates_excluded_when_not_native():
    updates, turns = evidence()
    updates[17]["rank_intervals_native"] = False  # update 18: a copied train-call interval
    h = contract.window_rates(updates, turns, 16, 20)
    assert h["trainer_rates"] == "not native"
    assert h["trainer_tokens_per_s"] is h["trainer_duty"] is h["rank_skew_max_s"] is h["trainer_busy_s"] is None
    assert h["updates_per_hour"] == pytest.approx(360.0)  # the end-to-end rates are unaffected
    assert contract.window_rates(evidence()[0], turns, 16, 20)["trainer_rates"] == "native"


def test_results_measured_window_and_secondary():
    updates, turns = evidence()
    r = contract.results(updates, turns, staleness_bound=4)
    assert r["measured"]["window_s"] == 150.0 and r["measured"]["updates"] == [6, 20]
    assert r["secondary"]["staleness_max"] == 5 and r["secondary"]["staleness_violations"] == 1
    assert r["per_update"][16]["e2e_s"] == pytest.approx(12.0)  # c_17 - c_16
    assert r["per_update"][0]["e2e_s"] is None


def test_incomplete_window():
    updates, turns = evidence()
    assert contract.window_rates(updates[:19], turns, 16, 20) == {"complete": False}
