"""Running a CLI on one malformed input and checking the contract of issue 16.

Every malformed input must give: exit status 2, no traceback, a message naming the location
(file and line, key path or option), and no file left behind (outputs are checked or staged
before work, so a refused input writes nothing).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from click.testing import CliRunner

from simrl.cli.compare import cli as compare_cli
from simrl.cli.main import cli as srl_cli
from simrl.cli.predict import main as predict_cli
from simrl.cli.psrl_plot import cli as psrl_cli
from simrl.cli.regress import cli as regress_cli
from simrl.cli.workload import main as workload_cli
from simrl.cost.observations import SCHEMA as OBS_SCHEMA
from simrl_explore.cli_sweep import main as sweep_cli
from simrl_explore.research.cli import main as research_cli

PROV = {"hardware": "H100", "source": "robustness test", "date": "2026-01-01"}

VALID_OBSERVATION = {"schema": OBS_SCHEMA, "kind": "iteration",
                     "inputs": {"batch_size": 4, "kv_tokens": 100, "prefill_tokens": 0},
                     "value": 12.5, "spread": 0.5, "unit": "ms", "provenance": PROV}

VALID_REALRUN = [
    {"schema": "simrl.realrun.v1", "system": "robustness", "model": "qwen3-8b", "instances": 2},
    {"step": 1, "start": 0.0, "end": 30.0, "train_s": 5.0, "sync_s": 2.0, "generated_tokens": 3000,
     "trained_tokens": 2000, "staleness": {"mean": 0.0, "max": 0}, "groups": 4, "trajectories": 16,
     "load": [{"t": 0.0, "instance": 0, "running": 10, "waiting": 2, "kv_used": 900}]},
    {"step": 2, "start": 30.0, "end": 61.0, "train_s": 5.5, "sync_s": 2.0, "generated_tokens": 2900,
     "trained_tokens": 2100, "staleness": [0, 1, 0, 1], "groups": 4, "trajectories": 16},
]

VALID_TURNS = [
    {"group": 0, "trajectory": 0, "turn": 0, "prompt_tokens": 100, "completion_tokens": 20, "reward": 1.0},
    {"group": 0, "trajectory": 0, "turn": 1, "prompt_tokens": 150, "completion_tokens": 30, "new_tokens": 30},
    {"group": 0, "trajectory": 1, "turn": 0, "prompt_tokens": 100, "completion_tokens": 25, "reward": 0.0},
    {"group": 0, "trajectory": 1, "turn": 1, "prompt_tokens": 160, "completion_tokens": 10},
]

VALID_CONFIG = {
    "deployment": {"model": "qwen3-8b", "rollout": {"instances": 2, "tp": 1, "max_num_seqs": 64,
                                                    "gpu_memory_utilization": 0.85},
                   "training": {"gpus": 8, "tp": 2}},
    "workload": {"generator": "rl_math", "groups": 16, "group_size": 4},
    "policy": {"kind": "bounded_async", "max_staleness": 1, "batch_groups": 4},
    "router": {"name": "least_requests", "cache_threshold": 0.3},
    "run": {"seed": 0, "training_steps": 2, "plots": False},
}

VALID_SPLITWISE = "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n4.3,396,109\n5.1,120,30\n"


def jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def valid_trace_text() -> str:
    from workloads.registry import generate
    from workloads.trace import group_lines, header_record

    w = generate("multi_turn", 3, 1, group_size=2, calls=2)
    return "\n".join([json.dumps(header_record(w)), *group_lines(w)]) + "\n"


SNAPSHOT_OVERRIDES = ["run.training_steps=2", "run.seed=0", "workload.groups=32", "workload.group_size=4",
                      "workload.knobs.max_completion=1024"]


@functools.lru_cache(maxsize=1)
def _valid_snapshot_text() -> str:
    from simrl.config import load_config
    from simrl.engine.sim import build_simulation
    from simrl.snapshot import snapshot_dict, take_snapshot

    sim = build_simulation(load_config(overrides=SNAPSHOT_OVERRIDES))
    sim.run_before(20.0)  # requests running on both engines, none finished yet
    return json.dumps(snapshot_dict(take_snapshot(sim)))


def valid_snapshot() -> dict:
    """A valid `simrl.snapshot.v1` document (a fresh copy) with requests in flight."""
    return json.loads(_valid_snapshot_text())


def valid_artifact_text() -> str:
    from pathlib import Path

    import simrl.cost

    return (Path(simrl.cost.__file__).parent / "data" / "rollout-roofline-h100.json").read_text(encoding="utf-8")


VALID_STUDY = {
    "name": "t", "question": "Does kv_cache_aware beat throughput_balance?",
    "base": {"set": {"deployment.model": "qwen3-8b", "workload.groups": 8, "run.training_steps": 1}},
    "family": "router", "baseline": {"name": "throughput_balance"}, "candidate": {"name": "kv_cache_aware"},
    "objective": "trained_tokens_per_s", "seeds": [0, 1],
    "variation": {"name": "length_dispersion", "values": [0.0, 1.0]}, "proposals": 0,
}


# Where each format's input goes and which command reads it. `{in}` is the input file, `{out}` an
# output path inside the same temporary directory (it must not exist afterwards).
COMMANDS = {
    "config": (srl_cli, ["run", "--config", "{in}", "-o", "{out}"], ".yaml"),
    "trace": (workload_cli, ["validate", "{in}"], ".jsonl"),
    "splitwise": (workload_cli, ["import", "splitwise", "{in}", "-o", "{out}"], ".csv"),
    "observations": (regress_cli, ["fit", "--family", "composed", "--obs", "{in}", "-o", "{out}"], ".jsonl"),
    "realrun": (compare_cli, ["{in}", "{in}", "-o", "{out}"], ".jsonl"),
    "collect": (workload_cli, ["collect", "{in}", "-o", "{out}"], ".jsonl"),
    "psrl": (psrl_cli, ["{in}", "-o", "{out}"], ".log"),
    "sweep": (sweep_cli, ["--space", "{in}", "-o", "{out}", "-q", "--jobs", "1"], ".yaml"),
    "snapshot": (predict_cli, ["predict", "{in}", "--draws", "1", "--requests", "0"], ".json"),
    "artifact": (regress_cli, ["show", "{in}"], ".json"),
    "research": (research_cli, ["{in}", "-o", "{out}", "--jobs", "1", "-q"], ".yaml"),
}


def small_run(out: Path, steps: int) -> Path:
    """A small `srl run` (8 groups, ``steps`` training steps, no plots) written under ``out``: its run directory."""
    res = CliRunner().invoke(srl_cli, ["run", "-o", str(out), "run.name=r", f"run.training_steps={steps}",
                                       "workload.groups=8", "run.plots=false", "-q"])
    assert res.exit_code == 0, res.output
    return out / "r"


def listing(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def check_clean_error(res, expect: list[str], where: str) -> None:
    out = res.output
    assert res.exit_code == 2, f"{where}: exit {res.exit_code}, expected 2\n{out}\n{res.exception!r}"
    assert res.exception is None or isinstance(res.exception, SystemExit), \
        f"{where}: raised {res.exception!r}"
    assert "Traceback" not in out, f"{where}: traceback\n{out}"
    assert out.strip(), f"{where}: no message"
    for e in expect:
        assert e in out, f"{where}: message does not name {e!r}:\n{out}"


def run_input(fmt: str, content: str | bytes, tmp: Path, expect: list[str], name: str = "input") -> None:
    """Write ``content`` as a ``fmt`` input, run its command, check the clean-error contract."""
    cli, args, ext = COMMANDS[fmt]
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / f"{name}{ext}"
    if isinstance(content, str):
        content = content.encode("utf-8")
    src.write_bytes(content)
    out = tmp / "out"
    before = listing(tmp)
    argv = [a.replace("{in}", str(src)).replace("{out}", str(out)) for a in args]
    res = CliRunner().invoke(cli, argv)
    expect = [e.replace("{in}", str(src)) for e in expect]
    check_clean_error(res, expect, f"{fmt}/{name}")
    assert listing(tmp) == before, f"{fmt}/{name}: left files behind: {sorted(listing(tmp) - before)}"
    src.unlink()


def run_args(cli, argv: list[str], tmp: Path, expect: list[str], name: str) -> None:
    """Run a command line that is itself malformed (bad option or override)."""
    tmp.mkdir(parents=True, exist_ok=True)
    before = listing(tmp)
    argv = [a.replace("{tmp}", str(tmp)) for a in argv]
    res = CliRunner().invoke(cli, argv)
    check_clean_error(res, [e.replace("{tmp}", str(tmp)) for e in expect], name)
    assert listing(tmp) == before, f"{name}: left files behind: {sorted(listing(tmp) - before)}"


def cwd_is_clean() -> bool:
    return not Path(os.getcwd(), "outputs").exists()
