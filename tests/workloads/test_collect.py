"""Collecting per-call logs (harness turns.jsonl and OpenAI-compatible request logs) into a workload."""

import json

import pytest

from workloads.collect import collect
from workloads.trace import TraceError


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def turns(group, traj, turn, prompt, completion, **extra):
    return {"group": group, "trajectory": traj, "turn": turn, "prompt_tokens": prompt,
            "completion_tokens": completion, **extra}


def test_turns_jsonl_out_of_order(tmp_path):
    log = write(tmp_path / "turns.jsonl", [
        turns(1, 0, 0, 50, 5, reward=1.0),
        turns(0, 1, 1, 140, 7, tool_latency_s=0.25),
        turns(0, 0, 0, 100, 20),
        turns(0, 1, 0, 100, 30),
        {"group": 0, "sample": 0, "turn": 1, "prompt_tokens": 150, "completion_tokens": 9, "new_tokens": 30,
         "reward": 0.5},
    ])
    w = collect([log], name="run")
    g0 = w.group(0)
    assert [[c.prompt_tokens for c in t.calls] for t in g0.trajectories] == [[100, 150], [100, 140]]
    assert [c.new_tokens for c in g0.trajectories[1].calls] == [100, 10]
    assert g0.trajectories[1].calls[1].tool_latency_s == 0.25
    assert [t.reward for t in g0.trajectories] == [0.5, 0.0]
    assert g0.shared_prompt_tokens == 100  # same first prompt: the group's prompt
    assert w.group(1).trajectories[0].reward == 1.0 and w.name == "run"


def test_openai_request_logs(tmp_path):
    def req(group, traj, turn, prompt, completion, salt=None, reward=None):
        meta = {"group": str(group), "trajectory": str(traj), "turn": str(turn)}
        if reward is not None:
            meta["reward"] = str(reward)
        request = {"model": "m", "metadata": meta, **({"cache_salt": salt} if salt else {})}
        return {"request": request, "response": {"usage": {"prompt_tokens": prompt,
                                                            "completion_tokens": completion}}}

    log = write(tmp_path / "requests.jsonl", [
        req("g7", 0, 0, 64, 16, salt="abc"), req("g7", 0, 1, 100, 8, salt="abc", reward=1),
        req("g7", 1, 0, 64, 32), req("g2", 0, 0, 10, 1),
    ])
    w = collect([log])
    assert w.n_groups == 2 and w.group(0).trajectories[0].calls[0].prompt_tokens == 10  # "g2" < "g7"
    g = w.group(1)
    assert [c.cache_salted for c in g.trajectories[0].calls] == [True, True]
    assert g.trajectories[0].calls[1].new_tokens == 20 and g.trajectories[0].reward == 1.0


@pytest.mark.parametrize("records, line, field", [
    ([turns(0, 0, 0, 10, 5), turns(0, 0, 1, 12, 5)], 2, "prompt_tokens"),
    ([turns(0, 0, 0, 10, 5), turns(0, 0, 0, 10, 5)], 2, "turn"),
    ([turns(0, 0, 0, 10, 0)], 1, "completion_tokens"),
    ([{"trajectory": 0, "turn": 0, "prompt_tokens": 1, "completion_tokens": 1}], 1, "group"),
    ([turns(0, 0, 0, 10, 5), turns(0, 0, 1, 20, 5, new_tokens=4)], 2, "new_tokens"),
])
def test_bad_logs_name_line_and_field(tmp_path, records, line, field):
    log = write(tmp_path / "l.jsonl", records)
    with pytest.raises(TraceError) as info:
        collect([log])
    assert (info.value.line, info.value.field) == (line, field)
