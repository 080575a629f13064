"""A taskset written as a third party would, with nothing but ``prl`` imports, rolled out
against prl.tasks.testing's byte renderer and scripted client: the recorded branches are
token-exact and the reward is what the kit's scoring helper gives."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from prl import hookimpl
from prl.config.components import SourceConfig
from prl.contracts import Task, Taskset, TasksetConfig
from prl.envs import EnvSource
from prl.tasks import (
    Conversation,
    episode_trace,
    exact_match,
    extract_boxed,
    numeric_match,
    strip_think,
    with_default_max_tokens,
)
from prl.tasks.testing import END, ByteRenderer, ScriptedClient, last_user
from prl.types import Sampling


class AddNumbers(Taskset):
    """Single turn: add two numbers, answer in \\boxed{}; reward 1 for the right value."""

    id = "tp-add"

    class Config(TasksetConfig):
        id: Literal["tp-add"] = "tp-add"
        """Taskset id."""
        size: int = 5
        """Tasks per split."""

    def tasks(self, split="train"):
        for i in range(self.config.size):
            a, b = i + 2, 3 * i + 1
            prompt = [{"role": "user", "content": f"What is {a} + {b}? Put the result in \\boxed{{}}."}]
            yield Task(task_id=f"{split}/{i}", prompt=prompt, data={"answer": a + b})

    async def rollout(self, task, client, renderer, sampling):
        conv = Conversation(renderer, task.prompt)
        reply = await conv.sample(client, with_default_max_tokens(sampling, 64))
        answer = extract_boxed(strip_think(reply))
        return episode_trace(task, conv, reward=numeric_match(answer, task.data["answer"]))


class Echo(Taskset):
    """Multi-turn: repeat each word the user says; reward is the mean exact match."""

    id = "tp-echo"

    class Config(TasksetConfig):
        id: Literal["tp-echo"] = "tp-echo"
        """Taskset id."""

    def tasks(self, split="train"):
        yield Task(
            task_id=f"{split}/0", prompt=[{"role": "user", "content": "alpha"}], data={"words": ["alpha", "beta"]}
        )

    async def rollout(self, task, client, renderer, sampling):
        conv = Conversation(renderer, task.prompt, agent="echoer")
        scores = []
        for t, word in enumerate(task.data["words"]):
            if t:
                conv.add({"role": "user", "content": word})
            scores.append(exact_match(await conv.sample(client, sampling), word))
        return episode_trace(task, conv, reward=sum(scores) / len(scores), metrics={"turn_1": scores[1]})


class ThirdParty:
    @hookimpl
    def prl_register_tasksets(self):
        return [AddNumbers, Echo]


def run(coro):
    return asyncio.run(coro)


def completion(text: str) -> list[int]:
    return [*text.encode(), END]


def test_single_turn_branch_is_token_exact_and_reward_comes_from_the_helpers():
    ts = AddNumbers(AddNumbers.Config(size=3))
    task = list(ts.tasks())[1]
    renderer = ByteRenderer()
    reply = "<think>3 + 4</think> \\boxed{7}"
    client = ScriptedClient(lambda msgs: reply)
    trace = run(ts.rollout(task, client, renderer, Sampling(temperature=0.7)))

    rendered = renderer.render(task.prompt, add_generation_prompt=True)
    prompt = rendered.token_ids
    (branch,) = trace.branches
    assert client.prompts == [prompt]
    assert branch.token_ids == prompt + completion(reply)
    assert branch.sampled_mask == [False] * len(prompt) + [True] * len(completion(reply))
    assert branch.logprobs == [0.0] * len(prompt) + [ScriptedClient.LOGPROB] * len(completion(reply))
    assert branch.roles == rendered.roles + ["assistant"] * len(completion(reply))
    assert branch.temperature == 0.7 and branch.agent == "default"
    assert trace.reward == numeric_match(extract_boxed(strip_think(reply)), 7) == 1.0
    assert trace.messages == [*task.prompt, {"role": "assistant", "content": reply}]
    assert trace.turns == 1 and not trace.is_truncated and trace.stop_condition == "stop"

    wrong = run(ts.rollout(task, ScriptedClient(lambda m: "\\boxed{8}"), renderer, Sampling()))
    missing = run(ts.rollout(task, ScriptedClient(lambda m: "7"), renderer, Sampling()))
    assert wrong.reward == 0.0 and missing.reward == 0.0  # no box is no answer


def test_bridged_turns_extend_one_branch_with_unsampled_environment_tokens():
    ts = Echo(Echo.Config())
    (task,) = ts.tasks()
    renderer = ByteRenderer(bridge=True)
    client = ScriptedClient(last_user)
    trace = run(ts.rollout(task, client, renderer, Sampling()))

    prompt = renderer.render_ids(task.prompt, add_generation_prompt=True)
    bridge = [*b"\n", *renderer.render_ids([{"role": "user", "content": "beta"}], add_generation_prompt=True)]
    (branch,) = trace.branches
    assert branch.token_ids == prompt + completion("alpha") + bridge + completion("beta")
    n1, n2 = len(completion("alpha")), len(completion("beta"))
    assert branch.sampled_mask == [False] * len(prompt) + [True] * n1 + [False] * len(bridge) + [True] * n2
    assert branch.logprobs == [0.0] * len(prompt) + [-0.25] * n1 + [0.0] * len(bridge) + [-0.25] * n2
    assert branch.roles[len(prompt) + n1 : len(prompt) + n1 + len(bridge)] == ["user"] * len(bridge)
    assert branch.agent == "echoer"
    # the second request is exactly the first branch so far: nothing was re-rendered
    assert client.prompts[1] == prompt + completion("alpha") + bridge
    assert trace.reward == 1.0 and trace.turns == 2


def test_without_a_bridge_every_turn_re_renders_into_a_new_branch():
    ts = Echo(Echo.Config())
    (task,) = ts.tasks()
    renderer = ByteRenderer(bridge=False)
    trace = run(ts.rollout(task, ScriptedClient(lambda m: "alpha"), renderer, Sampling()))

    first, second = trace.branches
    history = [*task.prompt, {"role": "assistant", "content": "alpha"}, {"role": "user", "content": "beta"}]
    reprompt = renderer.render_ids(history, add_generation_prompt=True)
    assert second.token_ids == reprompt + completion("alpha")
    assert second.sampled_mask == [False] * len(reprompt) + [True] * len(completion("alpha"))
    assert first.token_ids[-len(completion("alpha")) :] == completion("alpha")
    assert trace.reward == pytest.approx(0.5) and trace.metrics == {"turn_1": 0.0}


def test_a_cut_off_turn_is_truncation_and_the_next_turn_starts_a_new_branch():
    ts = Echo(Echo.Config())
    (task,) = ts.tasks()
    trace = run(ts.rollout(task, ScriptedClient(lambda m: "x" * 20), ByteRenderer(), Sampling(max_tokens=4)))
    assert len(trace.branches) == 2  # no end token to bridge from
    assert all(b.token_ids[-4:] == list(b"xxxx") and sum(b.sampled_mask) == 4 for b in trace.branches)
    assert trace.is_truncated and trace.stop_condition == "length" and trace.reward == 0.0


def test_registered_like_a_plugin_and_run_through_an_env_source(register_plugin):
    register_plugin(ThirdParty(), "third-party-tasks", "prl-third-party")
    src = SourceConfig.model_validate({"name": "adds", "env": {"taskset": {"id": "tp-add", "size": 4}}})
    env = EnvSource(src, "eval", None)
    tasks = env.tasks()
    assert [t.task_id for t in tasks] == [f"eval/{i}" for i in range(4)]

    def solve(msgs):
        a, _, b = last_user(msgs).removeprefix("What is ").partition(" + ")
        return f"\\boxed{{{int(a) + int(b.split('?')[0])}}}"

    async def scenario():
        await env.start()
        traces = [
            await env.rollout(t, ScriptedClient(solve), ByteRenderer(), Sampling(), policy_version=3) for t in tasks
        ]
        await env.close()
        return traces

    traces = run(scenario())
    assert all(t.ok and t.reward == 1.0 and t.env == "adds" and t.policy_version == 3 for t in traces)
