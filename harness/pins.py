"""Pinned identities and the measurement contract's fixed settings, in one place.

Everything a manifest records as "pins", "model", "contract" or "pipeline" comes from here,
so a change to a pin is one reviewed line. `pipeline_settings` gives each backend's native
pipeline shape (batch, workers, staleness, parallel layout) for a given `--skyrl-batch-size`.
"""

from __future__ import annotations

from typing import Any

ART_REPO = "https://github.com/OpenPipe/ART.git"
SKYRL_REPO = "https://github.com/NovaSky-AI/SkyRL.git"
# The commits the specification names. Neither could be reached here, so the drivers, the
# recipes (scripts/setup_*.sh) and the manifests use the sources in UPSTREAM below instead.
SPEC_ART_COMMIT = "2ebfc1c2a38dbeeaeefac998323b476989602942"
SPEC_SKYRL_COMMIT = "52063b6567a350e02d326699cd7d0f380bbad466"
# The sources each driver was checked against (scripts/check_upstream_api.py; its output is
# harness/pins_api_check.json) and that scripts/setup_*.sh install. ART: the newest release,
# openpipe-art 0.5.18 (sdist from PyPI; the GitHub snapshot reachable here stops in June 2025).
# SkyRL: the newest snapshot reachable here, a9564572e (the commit bench-contract.md cites).
UPSTREAM = {
    "art": {"repo": ART_REPO, "package": "openpipe-art", "version": "0.5.18",
            "archive": "openpipe_art-0.5.18.tar.gz",
            "sha256": "c1555143564b2dd26945ea5f8eb1ea9e2eae47d989c3de2e04bb88e8ffefe29a", "root": "src",
            "files": ["src/art/model.py", "src/art/trajectories.py", "src/art/dev/model.py",
                      "src/art/dev/engine.py", "src/art/local/backend.py", "src/art/megatron/runtime/backend.py",
                      "src/art/megatron/provider.py", "src/art/megatron/lora.py",
                      "src/art/pipeline_trainer/trainer.py"]},
    "skyrl": {"repo": SKYRL_REPO, "commit": "a9564572eb8e91076be43c1bd5e4615e3de17265", "root": ".",
              "files": ["skyrl/train/config/config.py", "skyrl/train/entrypoints/main_base.py",
                        "skyrl/train/fully_async_trainer.py", "skyrl/train/utils/metrics.py",
                        "skyrl/train/generators/base.py",
                        "skyrl/backends/skyrl_train/inference_servers/base.py", "skyrl/train/utils/utils.py"]},
}
MODEL = "Qwen/Qwen3.5-35B-A3B"
MODEL_REVISION = "59d61f3ce65a6d9863b86d2e96597125219dc754"
DTYPE = "bf16"
LORA_ALPHA = 32
LORA_RANKS = (8, 1)  # 8 is the headline; 1 is supplemental and reported separately
MAX_SEQ_LENGTH = 131072
CHAT_TEMPLATE_KWARGS = {"enable_thinking": False, "preserve_thinking": True}

BACKENDS = ("art", "skyrl")
WORKLOADS = ("multi_turn", "long_generation", "tool_history", "multi_turn_salted")
RUNTIMES = ("container", "native", "sim")
DEFAULT_SEED = 20250101

WARMUP_UPDATES = 5
MEASURED_UPDATES = 15
TOTAL_UPDATES = WARMUP_UPDATES + MEASURED_UPDATES
HEADLINE_FIRST, HEADLINE_LAST = 16, 20  # window (c_15, c_20]
GPUS_PER_RUN = 4
TRAINER_GPUS = 2
MEMORY_USED_THRESHOLD_MIB = 1024
INTERVAL_EPSILON_S = 1e-3  # clock slack allowed when checking rank intervals inside [d_k, c_k]
# A physical ceiling, not a measurement: no served LLM decodes one sequence faster than this (the
# fastest single-stream decoders, speculative included, are ~10x below it). A call whose tokens
# after its first arrive faster was written on a compressed timeline (seconds read as ms).
MAX_DECODE_TOKENS_PER_S = 20_000.0
# Likewise for training: the pinned model has ~3e9 active parameters, so even its forward pass alone
# (2 FLOP per parameter and token) caps one H200 (~1e15 dense bf16 FLOP/s) near 1.6e5 tokens/s.
MAX_TRAIN_TOKENS_PER_S_PER_GPU = 1_000_000.0

CONTRACT = {
    "warmup_updates": WARMUP_UPDATES,
    "measured_updates": MEASURED_UPDATES,
    "headline_updates": [HEADLINE_FIRST, HEADLINE_LAST],
    "window": "c15..c20",
    "trainer_rates": "cross-rank interval union of native per-rank intervals",
    "forced_lengths": "min_tokens = max_tokens = L, ignore_eos = true, no stop strings",
    "memory_used_threshold_mib": MEMORY_USED_THRESHOLD_MIB,
}


def lora_settings(rank: int) -> dict[str, Any]:
    return {
        "rank": rank,
        "alpha": LORA_ALPHA,
        "scope": "per-expert",
        "supplemental": rank != 8,
    }


def pipeline_settings(backend: str, skyrl_batch_size: int = 4) -> dict[str, Any]:
    """The backend's pinned pipeline shape. Group counts are prompt groups per update."""
    if backend == "art":
        return {
            "trainer": "PipelineTrainer",
            "groups_per_update": 4,  # min_batch_size == max_batch_size, so updates stay comparable
            "min_batch_size": 4,
            "max_batch_size": 4,
            "staleness_bound": 4,  # max_steps_off_policy
            "workers": 16,
            "autotune": "none (openpipe-art 0.5.18 has no autotuner; the batch is pinned directly)",
            "rollout_weights_mode": "lora",
            "packed_sequence_target": MAX_SEQ_LENGTH,
            "parallel": {"tp": 1, "cp": 1, "ep": 2, "dp": 2},  # openpipe-art 0.5.18 has no CP knob
            "trainer_ranks": TRAINER_GPUS,
            "inference_gpus": GPUS_PER_RUN - TRAINER_GPUS,
            "eval": False,
            "cache_salt_policy": "none (vLLM prefix cache shared across policy versions)",
        }
    if backend == "skyrl":
        if skyrl_batch_size not in (4, 1):
            raise ValueError("--skyrl-batch-size must be 4 or 1")
        workers = 12 if skyrl_batch_size == 4 else 3
        return {
            "trainer": "FullyAsyncRayPPOTrainer",
            "groups_per_update": skyrl_batch_size,
            "train_batch_size": skyrl_batch_size,
            "policy_mini_batch_size": skyrl_batch_size,
            "staleness_bound": 4,  # max_staleness_steps
            "workers": workers,  # num_parallel_generation_workers
            "parallel": {"tp": 1, "cp": 1, "ep": 2, "dp": 2},
            "trainer_ranks": TRAINER_GPUS,
            "inference_gpus": GPUS_PER_RUN - TRAINER_GPUS,
            "eval": False,
            "cache_salt_policy": "use_cache_salt=True: <policy>@<weight_version> per request",
        }
    raise ValueError(f"unknown backend {backend!r}")


def groups_needed(settings: dict[str, Any]) -> int:
    """Prompt groups the schedule must cover, so no group is ever sampled twice.

    The trained groups (B per update) plus everything that can be in flight or buffered when the
    last update trains: up to B x (S + 1) generated groups waiting (SkyRL's buffer bound; ART's
    queue holds S x B) and one group per rollout worker; then twice that tail again for groups
    discarded as stale or zero-variance and replaced (ART discards and refills; the simulated
    ART tool_history run samples 80 groups beyond the 80 it trains). A run that still exhausts
    the schedule stops with an error rather than sample a group twice.
    """
    b = settings["groups_per_update"]
    tail = b * (settings["staleness_bound"] + 1) + settings["workers"]
    return b * TOTAL_UPDATES + 3 * tail


def source_id(backend: str) -> str:
    """The upstream source a backend runs from, as the manifest records it."""
    up = UPSTREAM[backend]
    return f"{up['package']}=={up['version']}" if "version" in up else up["commit"]


def pins() -> dict[str, str]:
    return {
        "art_source": source_id("art"),
        "art_sdist_sha256": UPSTREAM["art"]["sha256"],
        "skyrl_commit": source_id("skyrl"),
        "spec_art_commit": SPEC_ART_COMMIT,
        "spec_skyrl_commit": SPEC_SKYRL_COMMIT,
        "model": MODEL,
        "model_revision": MODEL_REVISION,
    }
