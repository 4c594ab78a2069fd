"""Descriptive statistics of a workload, and a histogram chart of its lengths.

`workload_stats` returns a plain dict (quantiles of prompt, completion and new tokens, group
sizes, calls per trajectory, tool latency and the reward spread that decides how many groups a
GRPO trainer would drop); `format_stats` renders it as text; `stats_chart` builds an altair
chart, importing altair only when called (it is heavy and only the plot needs it).
"""

from __future__ import annotations

import numpy as np

from workloads.types import Workload

QUANTILES = (0.0, 0.1, 0.5, 0.9, 0.99, 1.0)


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {}
    qs = np.quantile(np.asarray(values, dtype=np.float64), QUANTILES)
    out = {f"p{round(q * 100):d}": float(v) for q, v in zip(QUANTILES, qs, strict=True)}
    out["mean"] = float(np.mean(values))
    return out


def reward_spread(workload: Workload) -> dict[str, float]:
    """Mean reward, mean within-group standard deviation and the zero-variance group fraction."""
    g_of_t = np.repeat(np.arange(workload.n_groups), np.diff(workload.group_traj_start))
    r = workload.traj_reward
    sizes = np.diff(workload.group_traj_start).astype(np.float64)
    mean = np.bincount(g_of_t, weights=r, minlength=workload.n_groups) / sizes
    var = np.bincount(g_of_t, weights=(r - mean[g_of_t]) ** 2, minlength=workload.n_groups) / sizes
    zero = np.isclose(var, 0.0, atol=1e-15)
    return {
        "mean": float(r.mean()),
        "mean_group_std": float(np.sqrt(var).mean()),
        "zero_variance_groups": float(zero.mean()),
    }


def workload_stats(workload: Workload) -> dict:
    """Counts, quantiles (p0, p10, p50, p90, p99, p100, mean) and reward spread of ``workload``."""
    first = workload.traj_call_start[:-1]
    later = np.ones(workload.n_calls, dtype=bool)
    later[first] = False
    last = workload.traj_call_start[1:] - 1
    return {
        "name": workload.name,
        "seed": workload.seed,
        "groups": workload.n_groups,
        "trajectories": workload.n_trajectories,
        "calls": workload.n_calls,
        "completion_tokens_total": int(workload.call_completion_tokens.sum()),
        "salted_calls": int(workload.call_cache_salted.sum()),
        "schedule_sha256": workload.schedule_sha256(),
        "quantiles": {
            "group_size": _quantiles(np.diff(workload.group_traj_start)),
            "calls_per_trajectory": _quantiles(np.diff(workload.traj_call_start)),
            "shared_prompt_tokens": _quantiles(workload.group_shared_prompt_tokens),
            "first_prompt_tokens": _quantiles(workload.call_prompt_tokens[first]),
            "prompt_tokens": _quantiles(workload.call_prompt_tokens),
            "new_tokens_later_calls": _quantiles(workload.call_new_tokens[later]),
            "completion_tokens": _quantiles(workload.call_completion_tokens),
            "final_context_tokens": _quantiles(workload.call_prompt_tokens[last]
                                               + workload.call_completion_tokens[last]),
            "tool_latency_s": _quantiles(workload.call_tool_latency_s),
        },
        "reward": reward_spread(workload),
    }


def format_stats(stats: dict) -> str:
    """A fixed-width text table of `workload_stats` output."""
    lines = [
        f"{stats['name']} (seed {stats['seed']}): {stats['groups']} groups, {stats['trajectories']} "
        f"trajectories, {stats['calls']} calls, {stats['completion_tokens_total']} completion tokens, "
        f"{stats['salted_calls']} salted calls",
        f"schedule_sha256 {stats['schedule_sha256']}",
        "",
        f"{'quantity':<24}" + "".join(f"{k:>10}" for k in ("p0", "p10", "p50", "p90", "p99", "p100", "mean")),
    ]
    for name, q in stats["quantiles"].items():
        if not q:
            lines.append(f"{name:<24}{'(none)':>10}")
            continue
        fmt = "{:>10.3f}" if name == "tool_latency_s" else "{:>10.1f}"
        lines.append(f"{name:<24}" + "".join(fmt.format(q[k]) for k in ("p0", "p10", "p50", "p90", "p99",
                                                                         "p100", "mean")))
    r = stats["reward"]
    lines += ["", f"reward: mean {r['mean']:.3f}, mean within-group std {r['mean_group_std']:.3f}, "
                  f"zero-variance groups {r['zero_variance_groups']:.1%}"]
    return "\n".join(lines)


def histogram_rows(workload: Workload, bins: int = 40) -> list[dict]:
    """Binned counts of first-prompt, new and completion tokens, as rows for a chart."""
    first = workload.traj_call_start[:-1]
    later = np.ones(workload.n_calls, dtype=bool)
    later[first] = False
    rows = []
    for name, values in (("first prompt tokens", workload.call_prompt_tokens[first]),
                         ("new tokens (later calls)", workload.call_new_tokens[later]),
                         ("completion tokens", workload.call_completion_tokens)):
        if len(values) == 0:
            continue
        counts, edges = np.histogram(values, bins=bins)
        rows += [{"quantity": name, "lo": float(lo), "hi": float(hi), "count": int(c)}
                 for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True)]
    return rows


def stats_chart(workload: Workload):
    """An altair chart: one histogram row per length quantity (altair imported here, lazily)."""
    import altair as alt

    data = alt.Data(values=histogram_rows(workload))
    bars = alt.Chart(data).mark_bar().encode(
        x=alt.X("lo:Q", bin="binned", title="tokens"),
        x2="hi:Q",
        y=alt.Y("count:Q", title="count"),
    ).properties(width=520, height=140)
    return bars.facet(row=alt.Row("quantity:N", title=None)).resolve_scale(x="independent", y="independent") \
        .properties(title=f"{workload.name}: {workload.n_groups} groups, {workload.n_trajectories} trajectories")


def write_png(chart, path) -> None:
    """Render an altair chart to PNG with vl-convert."""
    import vl_convert as vlc

    with open(path, "wb") as fh:
        fh.write(vlc.vegalite_to_png(chart.to_json(), scale=1.5))
