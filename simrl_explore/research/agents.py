"""Three agents behind one interface: propose, validate, analyse.

Every agent has ``role`` and ``run(state)``: it reads the shared `ResearchState` (the study, the
proposals, validations and lessons so far, and the lessons file's earlier lessons) and adds its
own record. `run_research` runs them in turn, once per proposal.

- `ProposalAgent` asks a proposer (`OfflineProposer`: optuna's TPE sampler when optuna is
  installed, else a seeded UCB1 bandit over the registry; `simrl_explore.research.llm.LLMProposer`:
  any OpenAI-compatible endpoint) for a typed strategy of the study's family. The stated
  candidate, when the study has one, is the first proposal. Every proposal is validated as a
  registry strategy before anything is simulated; an invalid one is recorded as rejected.
- `ValidationAgent` simulates baseline and proposal on the SimPy engine (the routers and
  admission rules are the oracle's) for every seed x variation, paired on the seed (same
  workload draw), in a spawn-method process pool, and computes the relative improvement per
  variation with a confidence interval (t or seeded bootstrap: deterministic given the seeds).
- `AnalysisAgent` turns a validation into a lesson: the claim, the conditions under which it
  holds (the variation range where the interval excludes 0 on each side), the value where the
  mean improvement changes sign (linear interpolation between neighbours), and the evidence;
  appended to ``lessons.jsonl`` (one JSON object a line) and rendered to ``lessons.md``.
  Proposers read earlier lessons of the same family and objective (optuna: as completed
  trials; the bandit: as arm statistics; the LLM: in its prompt).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Protocol

import attrs
import numpy as np

from simrl_explore.research.lessons import append_lesson, lessons_md, read_lessons  # noqa: F401 - re-exported
from simrl_explore.research.registry import REGISTRY, Strategy, StrategyError, make_strategy, overrides_for
from simrl_explore.research.stats import interval, sign_flip, verdict
from simrl_explore.research.study import Study, base_completion_knots


@attrs.define
class Proposal:
    index: int
    source: str  # stated | optuna | bandit | llm
    strategy: Strategy | None
    rationale: str = ""
    rejected: str | None = None  # why it was not simulated


@attrs.define
class Validation:
    proposal: int
    per_variation: list[dict]  # value, n, mean, low, high, verdict, baseline/candidate means
    overall: dict  # mean, low, high, verdict over every (variation, seed) pair
    runs: list[dict]  # every paired run (variation, seed, baseline, candidate, improvement)


@attrs.define
class ResearchState:
    study: Study
    prior_lessons: list[dict]
    proposals: list[Proposal] = attrs.field(factory=list)
    validations: list[Validation] = attrs.field(factory=list)
    lessons: list[dict] = attrs.field(factory=list)
    baseline_cache: dict = attrs.field(factory=dict)


class Agent(Protocol):
    role: str

    def run(self, state: ResearchState) -> None: ...


# -- proposers ---------------------------------------------------------------------------------------

def _relevant(lessons: list[dict], study: Study) -> list[dict]:
    fp = study.fingerprint()
    return [ls for ls in lessons if ls.get("family") == study.family and ls.get("objective") == study.objective
            and ls.get("fingerprint", {}).get("variation") == fp["variation"]]


def _tried(state: ResearchState) -> set[str]:
    return {json.dumps(p.strategy.to_dict(), sort_keys=True) for p in state.proposals if p.strategy is not None}


class OfflineProposer:
    """Search the registry: optuna TPE (seeded) when installed, else a seeded UCB1 bandit."""

    def __init__(self, study: Study, prior: list[dict], use_optuna: bool | None = None):
        self.study = study
        self.rng = np.random.default_rng(study.proposer_seed)
        self.names = sorted(study.search or REGISTRY[study.family])
        self.optuna = None
        if use_optuna is not False:
            try:
                import optuna
            except ImportError:
                if use_optuna:
                    raise
            else:
                optuna.logging.set_verbosity(optuna.logging.WARNING)
                self.optuna = optuna
        self.source = "optuna" if self.optuna else "bandit"
        self.arms: dict[str, list[float]] = {n: [] for n in self.names}
        self.pending = None
        if self.optuna:
            self.opt = self.optuna.create_study(direction="maximize",
                                                sampler=self.optuna.samplers.TPESampler(seed=study.proposer_seed))
        for ls in _relevant(prior, study):
            if ls["candidate"]["name"] not in self.names:
                continue
            self.observe(make_strategy(ls["family"], ls["candidate"]["name"], ls["candidate"]["params"]),
                         float(ls["evidence"]["overall"]["mean"]))

    def _distributions(self, name: str) -> dict:
        d = self.optuna.distributions
        out = {"strategy": d.CategoricalDistribution(self.names)}
        for a in attrs.fields(REGISTRY[self.study.family][name]):
            s = a.metadata["search"]
            key = f"{name}.{a.name}"
            if isinstance(s[0], str):
                out[key] = d.CategoricalDistribution(list(s))
            elif a.type in (int, "int"):
                out[key] = d.IntDistribution(int(s[0]), int(s[1]))
            else:
                out[key] = d.FloatDistribution(float(s[0]), float(s[1]))
        return out

    def observe(self, strategy: Strategy, improvement: float) -> None:
        """Record the mean improvement a validated strategy achieved (also from earlier lessons)."""
        if not math.isfinite(improvement):
            return
        self.arms.setdefault(strategy.name, []).append(improvement)
        if self.optuna:
            if self.pending is not None and self.pending[1] == strategy:
                self.opt.tell(self.pending[0], improvement)
                self.pending = None
                return
            params = {"strategy": strategy.name, **{f"{strategy.name}.{k}": v for k, v in strategy.params().items()}}
            dists = self._distributions(strategy.name)
            try:
                self.opt.add_trial(self.optuna.trial.create_trial(params=params, distributions=dists, value=improvement))
            except ValueError:
                pass  # a lesson outside today's search ranges: keep it for the bandit statistics only

    def propose(self, state: ResearchState) -> Proposal:
        tried = _tried(state)
        for _ in range(50):
            strat = self._ask() if self.optuna else self._bandit()
            if json.dumps(strat.to_dict(), sort_keys=True) not in tried and strat != self.study.baseline:
                break
            if self.optuna and self.pending is not None:
                self.opt.tell(self.pending[0], state=self.optuna.trial.TrialState.PRUNED)
                self.pending = None
        return Proposal(len(state.proposals), self.source, strat,
                        rationale=f"{self.source} search over the {self.study.family} registry")

    def _ask(self) -> Strategy:
        trial = self.opt.ask()
        name = trial.suggest_categorical("strategy", self.names)
        params = {}
        for key, dist in self._distributions(name).items():
            if key == "strategy":
                continue
            d = self.optuna.distributions
            if isinstance(dist, d.CategoricalDistribution):
                val = trial.suggest_categorical(key, list(dist.choices))
            elif isinstance(dist, d.IntDistribution):
                val = trial.suggest_int(key, dist.low, dist.high)
            else:
                val = round(trial.suggest_float(key, dist.low, dist.high), 3)
            params[key.split(".", 1)[1]] = val
        strat = make_strategy(self.study.family, name, params)
        self.pending = (trial, strat)
        return strat

    def _bandit(self) -> Strategy:
        total = sum(len(v) for v in self.arms.values()) + 1
        untried = [n for n in self.names if not self.arms[n]]
        if untried:
            name = untried[int(self.rng.integers(len(untried)))]
        else:
            name = max(self.names, key=lambda n: (np.mean(self.arms[n])
                                                  + math.sqrt(2 * math.log(total) / len(self.arms[n])), n))
        params = {}
        for a in attrs.fields(REGISTRY[self.study.family][name]):
            s = a.metadata["search"]
            if isinstance(s[0], str):
                params[a.name] = s[int(self.rng.integers(len(s)))]
            elif a.type in (int, "int"):
                params[a.name] = int(self.rng.integers(int(s[0]), int(s[1]) + 1))
            else:
                params[a.name] = float(round(self.rng.uniform(float(s[0]), float(s[1])), 3))
        return make_strategy(self.study.family, name, params)


class ProposalAgent:
    role = "proposal"

    def __init__(self, proposer):
        self.proposer = proposer

    def run(self, state: ResearchState) -> None:
        st = state.study
        if not state.proposals and st.candidate is not None:
            state.proposals.append(Proposal(0, "stated", st.candidate, rationale="the question's candidate"))
            return
        try:
            p = self.proposer.propose(state)
        except StrategyError as exc:
            p = Proposal(len(state.proposals), getattr(self.proposer, "source", "?"), None, rejected=str(exc))
        state.proposals.append(p)


# -- validation ----------------------------------------------------------------------------------------

class ValidationAgent:
    role = "validation"

    def __init__(self, jobs: int = 1, progress=None):
        self.jobs = jobs
        self.progress = progress or (lambda label, total: (lambda k: None))

    def _args(self, st: Study, strategy: Strategy, value, seed: int, knots) -> tuple:
        ov = [*st.base_set, *overrides_for({st.family: strategy}), *st.variation.overrides(value, knots),
              f"run.seed={seed}", "run.telemetry=false", "run.plots=false"]
        return (st.base_config, ov, 0)

    def run(self, state: ResearchState) -> None:
        from simrl_explore.runner import OraclePool

        st = state.study
        p = state.proposals[-1]
        if p.strategy is None:
            return
        knots = base_completion_knots(st) if (st.variation.name == "length_dispersion" and not st.variation.key) else None
        cells = [(v, s) for v in st.variation.values for s in st.seeds]
        todo: dict[tuple, tuple] = {}
        for v, s in cells:
            key = (str(v), s)
            if key not in state.baseline_cache:
                todo[("b", *key)] = self._args(st, st.baseline, v, s, knots)
            todo[("c", *key)] = self._args(st, p.strategy, v, s, knots)
        results: dict[tuple, dict] = {}
        tick = self.progress(f"validating {p.strategy.label()}", len(todo))
        with OraclePool(min(self.jobs, len(todo))) as pool:
            def cb_for(k):
                def cb(row):
                    results[k] = row
                    tick(1)
                return cb
            pending = [pool.submit(args, cb_for(k)) for k, args in todo.items()]
            for f in pending:
                f.get()
        for k, row in results.items():
            if k[0] == "b":
                state.baseline_cache[k[1:]] = row
        sign = 1 if st.direction == "max" else -1
        runs, per = [], []
        for v in st.variation.values:
            imps = []
            for s in st.seeds:
                b = state.baseline_cache[(str(v), s)]
                c = results[("c", str(v), s)]
                ok = b.get("status") != "failed" and c.get("status") != "failed"
                imp = sign * (c[st.column] - b[st.column]) / abs(b[st.column]) if ok else float("nan")
                runs.append({"variation": v, "seed": s, "baseline": b.get(st.column), "candidate": c.get(st.column),
                             "improvement": imp, "failed": None if ok else (b.get("reason") or c.get("reason"))})
                if ok:
                    imps.append(imp)
            m, lo, hi = interval(imps, st.interval, st.confidence, seed=st.proposer_seed) if imps else (
                float("nan"),) * 3
            per.append({"value": v, "n": len(imps), "mean": m, "low": lo, "high": hi, "verdict": verdict(lo, hi)})
        allv = [r["improvement"] for r in runs if math.isfinite(r["improvement"])]
        m, lo, hi = interval(allv, st.interval, st.confidence, seed=st.proposer_seed) if allv else (float("nan"),) * 3
        state.validations.append(Validation(p.index, per, {"mean": m, "low": lo, "high": hi, "n": len(allv),
                                                           "verdict": verdict(lo, hi)}, runs))


# -- analysis --------------------------------------------------------------------------------------------

def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.1%}"


def _ranges(per: list[dict], which: str) -> list[list]:
    """Contiguous runs of variation values whose verdict is ``which``: [[first, last], ...]."""
    out, cur = [], None
    for r in per:
        if r["verdict"] == which:
            cur = [r["value"], r["value"]] if cur is None else [cur[0], r["value"]]
        elif cur is not None:
            out.append(cur)
            cur = None
    if cur is not None:
        out.append(cur)
    return out


class AnalysisAgent:
    role = "analysis"

    def __init__(self, lessons_path: str):
        self.path = lessons_path

    def run(self, state: ResearchState) -> None:
        st = state.study
        if not state.validations or state.validations[-1].proposal != state.proposals[-1].index:
            return
        val = state.validations[-1]
        cand = state.proposals[-1].strategy
        per = val.per_variation
        vname = st.variation.key or st.variation.name
        numeric = all(isinstance(r["value"], int | float) and not isinstance(r["value"], bool) for r in per)
        flip = None
        if numeric and len(per) > 1:
            pts = [(float(r["value"]), r["mean"]) for r in per if math.isfinite(r["mean"])]
            flip = sign_flip([x for x, _ in pts], [y for _, y in pts])
        better, worse = _ranges(per, "better"), _ranges(per, "worse")
        changes = [{"between": [a["value"], b["value"]], "from": a["verdict"], "to": b["verdict"]}
                   for a, b in zip(per, per[1:], strict=False) if a["verdict"] != b["verdict"]]
        claim = self._claim(st, cand, val, better, worse, flip, vname, changes)
        lesson = {
            "question": st.question, "family": st.family, "objective": st.objective, "direction": st.direction,
            "fingerprint": st.fingerprint(), "baseline": st.baseline.to_dict(), "candidate": cand.to_dict(),
            "source": state.proposals[-1].source, "claim": claim,
            "conditions": {"variable": vname, "better": better, "worse": worse, "flip_at": flip,
                           "verdict_changes": changes,
                           "values": [r["value"] for r in per]},
            "evidence": {"per_variation": per, "overall": val.overall, "seeds": list(st.seeds),
                         "interval": st.interval, "confidence": st.confidence, "engine": "simpy",
                         "runs": len(val.runs)},
        }
        lesson["id"] = hashlib.sha256(json.dumps(lesson, sort_keys=True, default=str).encode()).hexdigest()[:12]
        state.lessons.append(lesson)
        append_lesson(self.path, lesson)

    @staticmethod
    def _claim(st, cand, val, better, worse, flip, vname, changes) -> str:
        o = val.overall
        what = f"{cand.label()} vs {st.baseline.label()} on {st.objective}"
        cond = []
        if better:
            cond.append("better for " + ", ".join(f"{vname} {a}..{b}" if a != b else f"{vname} {a}" for a, b in better))
        if worse:
            cond.append("worse for " + ", ".join(f"{vname} {a}..{b}" if a != b else f"{vname} {a}" for a, b in worse))
        text = f"{what}: overall {_pct(o['mean'])} ({_pct(o['low'])}..{_pct(o['high'])}, {o['verdict']})"
        if cond:
            text += "; " + "; ".join(cond)
        if flip is not None:
            text += f"; the mean improvement changes sign at {vname} ~ {flip:.2f}"
        elif len(val.per_variation) > 1:
            text += f"; no sign change over {vname} {val.per_variation[0]['value']}..{val.per_variation[-1]['value']}"
        if changes:
            text += "; the verdict changes " + ", ".join(
                f"from {c['from']} to {c['to']} between {vname} {c['between'][0]} and {c['between'][1]}" for c in changes)
        return text


def run_research(study: Study, proposer, lessons_path: str, jobs: int = 1, progress=None,
                 rounds: int | None = None) -> ResearchState:
    """Propose -> validate -> analyse, for the stated candidate and ``study.proposals`` more."""
    state = ResearchState(study, read_lessons(lessons_path))
    agents: list[Agent] = [ProposalAgent(proposer), ValidationAgent(jobs, progress), AnalysisAgent(lessons_path)]
    n = (1 if study.candidate is not None else 0) + (study.proposals if rounds is None else rounds)
    for _ in range(n):
        for agent in agents:
            agent.run(state)
        val = state.validations[-1] if state.validations else None
        p = state.proposals[-1]
        if val is not None and val.proposal == p.index and hasattr(proposer, "observe") and p.strategy is not None:
            proposer.observe(p.strategy, float(val.overall["mean"]))
    return state
