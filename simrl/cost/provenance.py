"""The run report's cost-provenance table, rendered from `Costs.provenance()` rows.

One row per role (rollout, training, weight sync): the family and what it is, where it came from
(the configured family name or artifact path), what it was fitted on, the GPU and layout it was
fitted for against the run's, and how many queries left its validity domain (worst value per
dimension). A fit from another GPU is marked "differs".
"""

from __future__ import annotations

from collections.abc import Sequence


def _layout(d: dict) -> str:
    parts = [str(d["model"])] if d.get("model") else []
    parts += [f"{k}{d[k]}" for k in ("tp", "pp") if d.get(k) is not None]
    return " ".join(parts)


def _outside(row: dict) -> str:
    n = int(row.get("queries_outside", 0))
    if not n:
        return "0"
    dims = "; ".join(f"{d}: {v['queries']} (worst {v['worst_value']:.6g} vs [{v['range'][0]:g}, {v['range'][1]:g}])"
                     for d, v in sorted(row.get("dimensions", {}).items()))
    return f"{n} ({dims})"


def provenance_markdown(rows: Sequence[dict]) -> list[str]:
    """Markdown lines of the cost-provenance table."""
    out = ["| role | family | source | fitted on | GPU: fitted / run | layout: fitted for / run | "
           "queries outside domain |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        fitted = r.get("fitted_gpu")
        gpu = f"{fitted or '-'} / {r.get('run_gpu', '')}"
        if fitted and fitted != r.get("run_gpu"):
            gpu += " (differs)"
        fitted_any = r.get("n_observations") or r.get("fitted_for") or fitted
        ff = _layout(r.get("fitted_for") or {}) or ("any" if fitted_any else "n/a")
        data = r.get("data", "")
        if r.get("n_observations"):
            data += f", {r['n_observations']} observations"
        family = f"`{r.get('family', '')}`" + (f": {r['basis']}" if r.get("basis") else "")
        out.append(f"| {r.get('role', '')} | {family} | `{r.get('spec', '')}` | {data} | {gpu} | "
                   f"{ff} / {_layout(r.get('run_layout') or {})} | {_outside(r)} |")
    return out
