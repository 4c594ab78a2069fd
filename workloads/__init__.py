"""Workloads: prompt groups of trajectories of model calls, drawn up front from a seed.

Imports nothing else of the repository. `workloads.types` holds the array types;
`generate(name, groups, seed, group_size=None, **knobs)` draws a registered synthetic workload,
`workloads.trace` reads and writes the JSONL trace format, `workloads.splitwise` imports real
request traces; the `srl-workload` command is `simrl.cli.workload` (the CLI layer).
"""

from workloads.registry import generate, generator_names, generator_spec
from workloads.sampling import QuantileDist, Streams
from workloads.types import CallSpec, GroupSpec, TrajectorySpec, Workload, build_workload

__all__ = [
    "CallSpec",
    "GroupSpec",
    "QuantileDist",
    "Streams",
    "TrajectorySpec",
    "Workload",
    "build_workload",
    "generate",
    "generator_names",
    "generator_spec",
]
