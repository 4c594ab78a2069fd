"""The checked-in corpus (corpus.py): every malformed input is a clean error.

Clean: exit status 2, no traceback, a message naming the location, no file left behind.
"""

from __future__ import annotations

import pytest
from corpus import (
    ARTIFACT,
    COLLECT,
    CONFIG,
    LESSONS,
    OBSERVATIONS,
    OPTIONS,
    OVERRIDES,
    PSRL,
    REALRUN,
    RESEARCH,
    SNAPSHOT,
    SPLITWISE,
    SWEEP,
    TRACE,
    _obs_file,
    counts,
)
from robust_common import run_args, run_input

from simrl.cli.compare import cli as compare_cli
from simrl.cli.main import cli as srl_cli
from simrl.cli.psrl_plot import cli as psrl_cli
from simrl.cli.regress import cli as regress_cli
from simrl.cli.workload import main as workload_cli

CLIS = {"srl": srl_cli, "srl-regress": regress_cli, "srl-workload": workload_cli, "srl-compare": compare_cli,
        "srl-psrl-plot": psrl_cli}

FILE_CASES = [(fmt, *case) for fmt, cases in (("config", CONFIG), ("trace", TRACE), ("splitwise", SPLITWISE),
                                              ("observations", OBSERVATIONS), ("realrun", REALRUN),
                                              ("collect", COLLECT), ("psrl", PSRL),
                                              ("snapshot", SNAPSHOT), ("artifact", ARTIFACT),
                                              ("research", RESEARCH)) for case in cases]


@pytest.mark.parametrize("fmt, name, content, expect", FILE_CASES, ids=[f"{c[0]}-{c[1]}" for c in FILE_CASES])
def test_malformed_file_is_a_clean_error(tmp_path, fmt, name, content, expect):
    run_input(fmt, content() if callable(content) else content, tmp_path, expect, name)


@pytest.mark.parametrize("name, overrides, expect", OVERRIDES, ids=[c[0] for c in OVERRIDES])
def test_malformed_override_is_a_clean_error(tmp_path, name, overrides, expect):
    run_args(srl_cli, ["run", "-o", "{tmp}/out", *overrides], tmp_path, expect, name)


@pytest.mark.parametrize("name, prog, argv, expect", OPTIONS, ids=[c[0] for c in OPTIONS])
def test_malformed_command_line_is_a_clean_error(tmp_path, name, prog, argv, expect):
    obs = _obs_file(tmp_path)
    argv = [a.replace("{obs}", obs) for a in argv]
    run_args(CLIS[prog], argv, tmp_path, [e.replace("{obs}", obs) for e in expect], name)


def test_corpus_size():
    n = counts()
    assert n["config"] >= 30 and n["trace"] >= 20 and sum(n.values()) >= 150, n


@pytest.mark.parametrize("name, content, expect", SWEEP, ids=[c[0] for c in SWEEP])
def test_malformed_sweep_space_is_a_clean_error(tmp_path, name, content, expect):
    run_input("sweep", content, tmp_path, expect, name)


@pytest.mark.parametrize("name, content, expect", LESSONS, ids=[c[0] for c in LESSONS])
def test_malformed_lessons_file_is_a_clean_error(tmp_path, name, content, expect):
    import yaml
    from robust_common import VALID_STUDY

    from simrl_explore.research.cli import main as research_cli

    inputs = tmp_path / "in"
    inputs.mkdir()
    study, lessons = inputs / "q.yaml", inputs / "lessons.jsonl"
    study.write_text(yaml.safe_dump(VALID_STUDY))
    lessons.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    run_args(research_cli, [str(study), "--lessons", str(lessons), "-o", "{tmp}/out", "--jobs", "1", "-q"],
             tmp_path / "work", [e.replace("{lessons}", str(lessons)) for e in expect], name)
