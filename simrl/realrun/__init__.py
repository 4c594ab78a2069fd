"""Real runs: the ``simrl.realrun.v1`` per-step JSONL format and converters into it.

`format` owns the records, the strict reader and the writer; `convert` turns a simulated run
directory or the bench harness's evidence into a real run; `psrl` reads a PSRL (veRL-style)
metric log. `load_run(path)` takes a real-run file, a simulated run directory or a harness
results directory. See docs/real-run-format.md.
"""

from simrl.realrun.convert import from_harness, from_sim_report, from_sim_run, load_run
from simrl.realrun.format import (
    SCHEMA,
    LoadSample,
    RealRun,
    RealRunError,
    RealStep,
    read_realrun,
    realrun_lines,
    write_realrun,
)
from simrl.realrun.psrl import from_psrl_log

__all__ = [
    "SCHEMA", "LoadSample", "RealRun", "RealRunError", "RealStep", "from_harness", "from_psrl_log",
    "from_sim_report", "from_sim_run", "load_run", "read_realrun", "realrun_lines", "write_realrun",
]
