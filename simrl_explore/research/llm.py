"""An optional proposer backed by any OpenAI-compatible chat-completions endpoint (urllib only).

Configuration from the environment: ``SIMRL_LLM_BASE_URL`` (e.g. ``http://127.0.0.1:8000/v1``;
``OPENAI_BASE_URL`` is read when it is unset), ``SIMRL_LLM_API_KEY`` (or ``OPENAI_API_KEY``;
may be empty for a local server) and ``SIMRL_LLM_MODEL``. The request is the documented
``POST {base}/chat/completions`` with ``model``, ``messages`` and ``temperature``; the reply's
``choices[0].message.content`` must hold one JSON object ``{"name", "params", "rationale"}``
(a code fence around it is tolerated). That object is validated as a registry strategy
(`simrl_explore.research.registry.make_strategy`) before anything is simulated; when it is not
valid, the model is asked once more with the validation error, and a second invalid answer is
recorded as a rejected proposal.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request

from simrl_explore.research.registry import StrategyError, make_strategy, strategy_schema


class LLMError(RuntimeError):
    """The endpoint is not configured, unreachable, or answered something that is not a reply."""


def llm_settings(env=None) -> tuple[str, str, str]:
    env = os.environ if env is None else env
    base = env.get("SIMRL_LLM_BASE_URL") or env.get("OPENAI_BASE_URL") or ""
    key = env.get("SIMRL_LLM_API_KEY") or env.get("OPENAI_API_KEY") or ""
    model = env.get("SIMRL_LLM_MODEL") or ""
    if not base or not model:
        raise LLMError("the LLM proposer needs SIMRL_LLM_BASE_URL (an OpenAI-compatible endpoint, e.g. "
                       "http://127.0.0.1:8000/v1) and SIMRL_LLM_MODEL; SIMRL_LLM_API_KEY if it wants one")
    return base.rstrip("/"), key, model


def extract_json(text: str) -> dict:
    """The first JSON object in ``text`` (inside a ```json fence or bare)."""
    m = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    candidates = [m.group(1)] if m else []
    start = text.find("{")
    if start >= 0:
        candidates.append(text[start:text.rfind("}") + 1])
    for c in candidates:
        try:
            obj = json.loads(c)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    raise StrategyError(f"the reply holds no JSON object: {text[:200]!r}")


class LLMProposer:
    source = "llm"

    def __init__(self, study, prior: list[dict], env=None, timeout_s: float = 60.0):
        self.study = study
        self.prior = prior
        self.base, self.key, self.model = llm_settings(env)
        self.timeout = timeout_s

    def _chat(self, messages: list[dict]) -> str:
        body = json.dumps({"model": self.model, "messages": messages, "temperature": 0.2}).encode()
        req = urllib.request.Request(f"{self.base}/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {self.key}"} if self.key else {})})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - a configured endpoint
                data = json.loads(resp.read().decode())
        except urllib.error.HTTPError as exc:
            raise LLMError(f"{self.base}/chat/completions: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise LLMError(f"{self.base}/chat/completions: {getattr(exc, 'reason', exc)}") from None
        except json.JSONDecodeError:
            raise LLMError(f"{self.base}/chat/completions: the reply is not JSON") from None
        try:
            return str(data["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError):
            raise LLMError(f"{self.base}/chat/completions: no choices[0].message.content in the reply") from None

    def messages(self, state) -> list[dict]:
        st = self.study
        lessons = [{"candidate": ls["candidate"], "claim": ls["claim"], "conditions": ls["conditions"]}
                   for ls in (self.prior + state.lessons)
                   if ls.get("family") == st.family][-10:]
        tried = [p.strategy.to_dict() for p in state.proposals if p.strategy is not None]
        system = ("You design scheduling strategies for an RL post-training simulator. Answer with one JSON "
                  "object only: {\"name\": <strategy name>, \"params\": {...}, \"rationale\": <one sentence>}. "
                  "Use only the strategies and parameters of this registry (types and ranges given):\n"
                  + json.dumps({st.family: {k: v for k, v in strategy_schema(st.family)[st.family].items()
                                          if not st.search or k in st.search}}, indent=1))
        user = (f"Question: {st.question}\nBaseline: {json.dumps(st.baseline.to_dict())}\n"
                f"Objective: {st.objective} ({st.direction}imise), validated over workload variation "
                f"{st.variation.key or st.variation.name} = {list(st.variation.values)}.\n"
                f"Already tried: {json.dumps(tried)}\nLessons so far: {json.dumps(lessons, default=str)}\n"
                "Propose one new strategy (not already tried) likely to answer or improve on the question.")
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def propose(self, state):
        from simrl_explore.research.agents import Proposal

        msgs = self.messages(state)
        err = None
        for _ in range(2):
            text = self._chat(msgs)
            try:
                obj = extract_json(text)
                extra = sorted(set(obj) - {"name", "params", "rationale", "family"})
                if extra:
                    raise StrategyError(f"unknown key {extra[0]!r}; expected name, params, rationale")
                if obj.get("family", self.study.family) != self.study.family:
                    raise StrategyError(f"family must be {self.study.family!r}")
                strat = make_strategy(self.study.family, obj.get("name"), obj.get("params") or {})
                return Proposal(len(state.proposals), self.source, strat, rationale=str(obj.get("rationale", "")))
            except StrategyError as exc:
                err = str(exc)
                msgs = [*msgs, {"role": "assistant", "content": text},
                        {"role": "user", "content": f"That is not a valid strategy: {err}. Answer again with one "
                                                    "valid JSON object."}]
        return Proposal(len(state.proposals), self.source, None, rejected=f"invalid LLM proposal: {err}")
