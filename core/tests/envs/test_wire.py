"""What an env server sends back is what the taskset recorded: a trace crossing the JSON
wire keeps which tokens the policy sampled and which the environment supplied, their
logprobs and weights, and tasks and sampling settings arrive unchanged."""

from __future__ import annotations

import json

from prl.contracts.taskset import Task
from prl.envs.wire import (
    sampling_from_dict,
    sampling_to_dict,
    task_from_dict,
    task_to_dict,
    trace_from_dict,
    trace_to_dict,
)
from prl.tasks.branches import add_observation, add_sampled, start_branch
from prl.types import Generation, Sampling, Trace


def over_the_wire(data: dict) -> dict:
    return json.loads(json.dumps(data))


def recorded_trace() -> Trace:
    branch = start_branch([1, 2, 3], roles=["user"] * 3, agent="solver", temperature=0.7)
    add_sampled(branch, Generation([4, 5], [-0.5, -0.25], "stop", sampling_mask=[[4, 9], [5]],
                                   sampling_mask_logprobs=[[-0.5, -1.5], [-0.25]]))  # fmt: skip
    add_observation(branch, [6, 7], role="tool")
    branch.advantages = [0.0, 0.0, 0.0, 1.5, 1.5, 0.0, 0.0]
    second = start_branch([8])
    return Trace("t1", "task-3", "math", [branch, second], reward=1.0, agent_rewards={"solver": 1.0},
                 metrics={"len": 2.0}, messages=[{"role": "user", "content": "hi"}], turns=2,
                 is_truncated=True, error=None)  # fmt: skip


def test_a_trace_keeps_sampled_and_environment_tokens_apart():
    trace = recorded_trace()
    back = trace_from_dict(over_the_wire(trace_to_dict(trace)))
    assert back == trace
    branch = back.branches[0]
    assert branch.sampled_mask == [False, False, False, True, True, False, False]
    assert branch.logprobs == [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, 0.0]
    assert branch.roles == ["user"] * 3 + ["assistant"] * 2 + ["tool"] * 2
    assert branch.sampling_mask == [[], [], [], [4, 9], [5], [], []]
    assert back.branches[1].token_ids == [8] and back.branches[1].sampled_mask == [False]


def test_fields_a_newer_peer_adds_are_dropped():
    data = trace_to_dict(recorded_trace())
    data["from_the_future"] = 1
    data["branches"][0]["also_new"] = [1]
    back = trace_from_dict(data)
    assert back == recorded_trace()
    no_branches = {k: v for k, v in data.items() if k != "branches"}
    assert trace_from_dict(no_branches).branches == []


def test_tasks_and_sampling_arrive_unchanged():
    task = Task(task_id="7", prompt=[{"role": "user", "content": "2+2"}], data={"answer": 4})
    assert task_from_dict(over_the_wire(task_to_dict(task))) == task
    assert task_from_dict({"task_id": 7}) == Task(task_id="7", prompt=[], data={})
    sampling = Sampling(temperature=0.6, top_p=0.9, top_k=20, max_tokens=64, stop=["\n"], seed=3)
    assert sampling_from_dict(over_the_wire(sampling_to_dict(sampling))) == sampling
    assert sampling_from_dict({"temperature": 0.2, "newer_knob": True}) == Sampling(temperature=0.2)
