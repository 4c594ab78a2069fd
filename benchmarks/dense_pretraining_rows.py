"""Megatron-Bridge's dense Llama pretraining rows against the analytical trainer, across GPU generations.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/dense_pretraining_rows.py`` (a few seconds).

A benchmark, not a test: it asserts nothing and nothing here is a card. It prints, for the published dense
rows that exist on DGX-GB200 / DGX-B200 and DGX-H100 (NVIDIA-NeMo/Megatron-Bridge@067f987d
``docs/performance-summary.md`` and ``docs/performance-summary-archive.md``; all of them FP8 current scaling,
none BF16), the simulator's tokens/s/GPU at its defaults (BF16 at MFU 0.4, so the absolute numbers are
low by the FP8 gain) and, per container, the Blackwell/H100 ratio three ways: published, the simulator at
each row's layout, and the simulator's compute alone (the datasheet peak ratio, 2.53 and 2.27). The ratio
published / peak ratio is the Blackwell chip's achieved fraction of peak relative to H100's.

Then the one-constant test of a per-GPU efficiency (docs/fidelity.md, "Achieved training efficiency across
GPU generations"): a GB200 factor fitted on the 8B rows, scored on the held-out 70B rows.
"""

from __future__ import annotations

import statistics

from simrl.cost.analytical import AnalyticalTraining

L8, L70 = "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B"
H100_70B = dict(tp=4, pp=8, virtual_pipeline_stages=5)

#: (container, model, GPU, GPUs, layout, MBS, GBS, sequence, published tokens/s/GPU); FP8 current scaling.
#: Llama3 8B / 70B rows are run on the Llama-3.1 architectures (the same layers, heads and vocabulary).
ROWS = [
    ("25.09", L8, "GB200", 8, {}, 2, 128, 8192, 31357),
    ("25.09", L8, "B200", 8, {}, 2, 128, 8192, 29994),
    ("25.09", L8, "H100", 8, dict(zero_stage=3), 1, 128, 8192, 14079),  # FSDP 8
    ("25.11", L8, "GB200", 8, {}, 2, 128, 8192, 31508),
    ("25.11", L8, "B200", 8, {}, 2, 128, 8192, 30624),
    ("25.11", L8, "H100", 8, dict(zero_stage=3), 1, 128, 8192, 14451),
    ("25.09", L70, "GB200", 64, dict(zero_stage=3), 2, 128, 8192, 3986),  # FSDP 64
    ("25.09", L70, "H100", 64, H100_70B, 1, 128, 8192, 1619),
    ("25.11", L70, "GB200", 64, dict(zero_stage=3), 2, 256, 8192, 4312),
    ("25.11", L70, "H100", 64, H100_70B, 1, 128, 8192, 1602),
    ("26.02", L70, "GB200", 64, dict(zero_stage=3), 2, 256, 8192, 4040),
    ("26.02", L70, "H100", 64, H100_70B, 1, 256, 8192, 1621),
    ("26.02.01", L70, "GB200", 64, dict(zero_stage=3), 2, 256, 8192, 4357),
    ("26.02.01", L70, "H100", 64, H100_70B, 1, 256, 8192, 1639),
    ("26.04", L70, "GB200", 64, dict(zero_stage=3), 2, 256, 8192, 4143),
    ("26.04", L70, "H100", 64, H100_70B, 1, 256, 8192, 1633),
    ("26.04.01", L70, "GB200", 64, dict(zero_stage=3), 2, 256, 8192, 4224),
    ("26.04.01", L70, "H100", 64, H100_70B, 1, 256, 8192, 1664),
    ("26.06 SFT", L70, "GB200", 32, dict(pp=8, virtual_pipeline_stages=10), 1, 32, 4096, 3864),
    ("26.06 SFT", L70, "H100", 32, dict(tp=4, pp=4, virtual_pipeline_stages=5), 1, 32, 4096, 1638),
]


def main() -> None:
    rows: dict[tuple[str, str, str], tuple[float, float]] = {}
    print(f"{'container':10s} {'model':5s} {'GPU':6s} {'published':>9s} {'simulated':>9s}")
    for cont, model, gpu, n, lay, mbs, gbs, seq, pub in ROWS:
        t = AnalyticalTraining(model, gpu, gpus=n, micro_batch_size=mbs, activation_checkpointing=False, **lay)
        sim = gbs * seq / n / t.step_time([seq] * gbs)
        rows[(cont, model, gpu)] = (sim, pub)
        print(f"{cont:10s} {model[-3:]:5s} {gpu:6s} {pub:9d} {sim:9.0f}")
    peak = {g: AnalyticalTraining(L8, g).gpu.bf16_flops_per_s for g in ("H100", "B200", "GB200")}
    print(f"\n{'container':10s} {'model':5s} {'pair':11s} {'published':>9s} {'layouts':>8s} {'compute':>8s} "
          f"{'pub/peak':>8s}")
    rel: dict[tuple[str, str], float] = {}
    for (cont, model, gpu), (sim, pub) in rows.items():
        if gpu == "H100":
            continue
        hsim, hpub = rows[(cont, model, "H100")]
        ratio, peak_ratio = pub / hpub, peak[gpu] / peak["H100"]
        if gpu == "GB200":
            rel[(cont, model)] = ratio / peak_ratio
        print(f"{cont:10s} {model[-3:]:5s} {gpu + '/H100':11s} {ratio:9.3f} {sim / hsim:8.3f} {peak_ratio:8.3f} "
              f"{ratio / peak_ratio:8.3f}")
    # one GB200 factor f (train_mfu = 0.4 f) fitted on the 8B rows, scored on the 70B rows (compute alone:
    # the simulated ratio is f x the peak ratio)
    fit = statistics.mean(v for (c, m), v in rel.items() if m == L8)
    held = [v for (c, m), v in rel.items() if m == L70]
    before = statistics.median(abs(1 / v - 1) for v in held)
    after = statistics.median(abs(fit / v - 1) for v in held)
    print(f"\nGB200 factor fitted on the 8B rows: {fit:.3f}; held-out 70B rows ({len(held)}), median |error| of the "
          f"GB200/H100 ratio (compute alone): {before:.1%} before, {after:.1%} after")


if __name__ == "__main__":
    main()
