"""The outsider's differential generator (tests/fast/outsider.py) on a few seeds, ``-m slow`` only: configurations
written as override lists through the public loaders (`load_config`, `load_workload`, `build_costs`), both engines,
every accepted case equal per step and per call, every refusal a named `FastPathUnsupported` / `FastPathNoProgress`.
Seed 106 is ART with a blocking output queue on a constant workload (the dispatcher before the trainer at the
first batch, tests/fast/test_first_batch_order.py). Longer scans: ``python tests/fast/outsider.py --seeds A:B``."""

import pytest

pytest.importorskip("jax")

from outsider import run_batch  # noqa: E402


@pytest.mark.slow
def test_outsider_seeds_match_or_are_refused_by_name():
    out = run_batch([106, *range(200, 216)], groups=6, n=4)
    assert not out["crash"], out["crash"]
    assert not out["mismatch"], out["mismatch"]
    assert out["compared"] >= 4
