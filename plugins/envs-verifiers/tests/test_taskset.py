"""prl-envs-verifiers without a model: ids, config mapping, offline data, client settings."""

from __future__ import annotations

import json

from prl_envs_verifiers import VerifiersTaskset, VfReverseText
from prl_envs_verifiers.remote import sampling_config, train_client_config

from prl.config.components import SourceConfig
from prl.envs import build_taskset
from prl.plugins import get_registry
from prl.types import Sampling


def test_ids_do_not_collide_with_the_builtin_reverse_text():
    classes = get_registry().classes("tasksets")
    assert classes["vf-reverse-text"] is VfReverseText and classes["verifiers"] is VerifiersTaskset
    if "reverse-text" in classes:  # prl-tasks-builtin keeps plain reverse-text
        assert classes["reverse-text"].__module__.startswith("prl_tasks_builtin")
    assert not VfReverseText.in_process


def source(taskset: dict, agent: dict | None = None) -> SourceConfig:
    env = {"taskset": taskset, **({"agent": agent} if agent else {})}
    return SourceConfig.model_validate({"name": "vf", "env": env})


def test_agent_and_runtime_map_onto_verifiers_env_block():
    ts = build_taskset(
        source(
            {"id": "vf-reverse-text", "args": {"num_examples": 3}},
            {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}},
        )
    )
    data = ts.env_data("eval")
    assert data == {
        "taskset": {"num_examples": 3, "id": "vf-reverse-text", "split": "eval"},
        "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}},
    }


def test_tasks_come_from_local_files_and_splits_differ(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps({"text": t}) for t in ["abc", "hello world"]) + "\n")
    ts = build_taskset(source({"id": "verifiers", "name": "vf-reverse-text", "args": {"data_path": str(rows)}}))
    tasks = list(ts.tasks("train"))
    assert [t.data["vf"]["text"] for t in tasks] == ["abc", "hello world"]
    assert tasks[1].prompt[-1] == {"role": "user", "content": "hello world"}
    gen = build_taskset(source({"id": "vf-reverse-text", "args": {"num_examples": 20}}))
    train = [t.data["vf"]["text"] for t in gen.tasks("train")]
    assert (
        train == [t.data["vf"]["text"] for t in gen.tasks("train")] != [t.data["vf"]["text"] for t in gen.tasks("eval")]
    )


class _Client:
    base_url = "http://127.0.0.1:8123"
    model = "models/tiny"


class _Renderer:
    tokenizer_path = "models/tiny"


def test_train_client_uses_token_route_of_the_same_server():
    cfg = train_client_config(_Client(), _Renderer(), None)
    assert cfg.type == "train" and cfg.base_url == "http://127.0.0.1:8123/v1"
    assert cfg.api_key_var == "PRL_API_KEY" and cfg.renderer_model_name == "models/tiny"
    s = sampling_config(Sampling(temperature=0.7, top_p=0.9, top_k=5, max_tokens=12, seed=3))
    assert (s.temperature, s.top_p, s.max_tokens) == (0.7, 0.9, 12)
    assert s.model_extra == {"top_k": 5, "seed": 3}


def _episode(seats: list[tuple[str, float]], errors: list[dict] | None = None):
    from verifiers.v1.episode import WireEpisode

    task = {"type": "ReverseTextTask", "data": {"prompt": "ab", "text": "ab"}}

    def node(parent, role, content, ids, mask, lps):
        return {
            "parent": parent,
            "message": {"role": role, "content": content},
            "token_ids": ids,
            "mask": mask,
            "logprobs": lps,
            "sampled": role == "assistant",
        }

    traces = [
        {
            "task": task,
            "agent": {"config": {}, "name": name},
            "ok": True,
            "metrics": {"exact": 0.0},
            "rewards": {"lcs": {"score": score}},
            "nodes": [
                node(None, "user", "ab", [1, 2, 3], [False] * 3, []),
                node(0, "assistant", "ba", [4, 5, 6], [False, True, True], [-0.5, -0.25]),
            ],
        }
        for name, score in seats
    ]
    return WireEpisode.model_validate({"id": "ep1", "task": task, "traces": traces, "ok": True, "errors": errors or []})


def test_episode_becomes_a_trace_with_exact_tokens():
    from prl_envs_verifiers.remote import episode_to_trace

    from prl.contracts.taskset import Task

    task = Task("eval/0", [{"role": "user", "content": "ab"}])
    trace = episode_to_trace(_episode([("agent", 0.5)]), task, Sampling(temperature=0.8))
    (b,) = trace.branches
    assert b.token_ids == [1, 2, 3, 4, 5, 6] and b.sampled_mask == [False] * 4 + [True] * 2
    assert b.logprobs == [0.0] * 4 + [-0.5, -0.25] and b.agent == "default" and b.temperature == 0.8
    assert trace.reward == 0.5 and trace.agent_rewards == {} and trace.ok
    assert trace.metrics == {"exact": 0.0, "reward/lcs": 0.5} and trace.messages[-1]["content"] == "ba"

    two = episode_to_trace(_episode([("proposer", 1.0), ("solver", 0.0)]), task, Sampling())
    assert two.agent_rewards == {"proposer": 1.0, "solver": 0.0} and two.reward == 0.5
    assert [b.agent for b in two.branches] == ["proposer", "solver"]

    failed = episode_to_trace(_episode([], errors=[{"type": "HarnessError", "message": "exited 1"}]), task, Sampling())
    assert failed.error == "HarnessError: exited 1" and not failed.ok and failed.branches == []
