"""Workloads: prompt groups of trajectories of model calls, drawn up front from a seed.

Imports nothing else of the repository. `workloads.types` holds the array types;
generators, trace I/O and the `srl-workload` CLI build on them.
"""

from workloads.types import CallSpec, GroupSpec, TrajectorySpec, Workload, build_workload

__all__ = ["CallSpec", "GroupSpec", "TrajectorySpec", "Workload", "build_workload"]
