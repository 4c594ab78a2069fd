"""docs/fastpath.md holds the table `simrl_fast.coverage` prints: every reason each preset at its
defaults is refused by the fast path (numpy only, no jax)."""

from pathlib import Path

from simrl_fast.coverage import coverage, presets, table

DOC = Path(__file__).resolve().parents[2] / "docs" / "fastpath.md"
BEGIN, END = "<!-- coverage table: python -m simrl_fast.coverage -->\n", "<!-- end of coverage table -->"


def test_the_docs_hold_the_generated_table():
    text = DOC.read_text()
    assert BEGIN in text and END in text, f"{DOC}: the coverage table markers are missing"
    held = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert held == table(), "docs/fastpath.md is stale: paste the output of `python -m simrl_fast.coverage`"


def test_every_reason_is_listed_not_only_the_first():
    # verl_v1 at its defaults: colocated, on_demand KV, chunked prefill, the prefix cache, and its record's
    # oldest-dispatch-first batches, drops by dispatch age and returned admission slots all lower
    c = coverage("verl_v1")
    assert (c.config, c.policy, c.fixed) == ((), (), "runs")
    # once the configuration reasons are fixed, the presets with an exact, supported record run
    runs = {k for k in presets() if coverage(k).fixed == "runs"}
    assert runs == {"sync", "bounded_async", "areal", "skyrl", "verl", "openrlhf", "nemo_rl", "roll", "art", "trl",
                    "slime", "psrl", "verl_v1", "dressage"}
    # dressage's record extension (fail_on_version_crossing) runs with its defaults' chunked prefill (8192 tokens)
    # and prefix cache (simrl_fast.crossing): nothing to fix
    d = coverage("dressage")
    assert d.config == () and d.policy == () and d.fixed == "runs"
