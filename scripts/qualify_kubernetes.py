"""Kubernetes image qualification for RL Systems Bench; same as `bench k8s` (see harness/k8s.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.k8s_cli import main  # noqa: E402

if __name__ == "__main__":
    main()
