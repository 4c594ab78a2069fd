#!/usr/bin/env bash
# Is kv_cache_aware routing better than throughput_balance on this workload, and under what
# length dispersion does the answer flip? One command, offline: the stated candidate and two
# optuna (or bandit) proposals (kv_cache_aware parameter changes), each validated over 5 seeds x
# 6 dispersions on the SimPy engine;
# writes report.md (the answer), research.png, runs.csv, lessons.jsonl / lessons.md.
#   bash examples/research/routing.sh [OUT]        (default OUT: outputs/routing)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${BIN:-$here/.venv/bin}"
out="${1:-outputs/routing}"
"$bin/srl-research" "$here/examples/research/routing.yaml" -o "$out"
