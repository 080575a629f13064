"""Behaviour of the builtin tasksets against a scripted policy."""

from __future__ import annotations

import asyncio

import pytest
from prl_tasks_builtin import AlphabetSort, KuhnPoker, ProposerSolver, ReverseText
from prl_tasks_builtin.proposer_solver import evaluate

from prl.tasks.testing import END, ByteRenderer, ScriptedClient, last_user
from prl.types import Sampling


def run(coro):
    return asyncio.run(coro)


def test_reverse_text_data_is_deterministic_and_splits_disjoint():
    ts = ReverseText(ReverseText.Config(num_train=300, num_eval=50))
    train = [t.data["text"] for t in ts.tasks("train")]
    assert train == [t.data["text"] for t in ReverseText(ReverseText.Config(num_train=300, num_eval=50)).tasks("train")]
    evals = [t.data["text"] for t in ts.tasks("eval")]
    assert len(train) == 300 and len(evals) == 50
    assert not set(train) & set(evals)
    # "test" is the reference's name for the held-out split
    assert [t.data["text"] for t in ts.tasks("test")] == evals
    with pytest.raises(ValueError, match="splits"):
        list(ts.tasks("validation"))


def test_reverse_text_perfect_policy_gets_full_reward_with_exact_tokens():
    ts = ReverseText(ReverseText.Config(num_train=5))
    task = next(iter(ts.tasks("train")))
    renderer = ByteRenderer()
    client = ScriptedClient(lambda msgs: last_user(msgs)[::-1])
    trace = run(ts.rollout(task, client, renderer, Sampling()))
    assert trace.reward == 1.0 and trace.metrics["exact"] == 1.0
    (branch,) = trace.branches
    prompt = renderer.render_ids(task.prompt, add_generation_prompt=True)
    completion = [*task.data["text"][::-1].encode(), END]
    assert branch.token_ids == prompt + completion
    assert branch.sampled_mask == [False] * len(prompt) + [True] * len(completion)
    assert branch.logprobs == [0.0] * len(prompt) + [ScriptedClient.LOGPROB] * len(completion)
    assert client.prompts == [prompt]


def test_reverse_text_partial_answer_gets_partial_reward_and_truncation_is_flagged():
    ts = ReverseText(ReverseText.Config(num_train=5))
    task = next(iter(ts.tasks("train")))
    half = task.data["answer"][: len(task.data["answer"]) // 2]
    trace = run(ts.rollout(task, ScriptedClient(lambda m: half), ByteRenderer(), Sampling()))
    assert 0.0 < trace.reward < 1.0 and trace.metrics["exact"] == 0.0
    cut = run(ts.rollout(task, ScriptedClient(lambda m: "x" * 100), ByteRenderer(), Sampling(max_tokens=8)))
    assert cut.is_truncated and sum(cut.branches[0].sampled_mask) == 8


def _sorter(msgs):
    names = []
    for m in msgs:
        if m["role"] == "user":
            names += m["content"].splitlines()[1:]
    return "\n".join(sorted(names))


@pytest.mark.parametrize("bridge", [True, False])
def test_alphabet_sort_multi_turn_branches(bridge):
    ts = AlphabetSort(AlphabetSort.Config(num_train=3, num_turns=3))
    task = next(iter(ts.tasks("train")))
    trace = run(ts.rollout(task, ScriptedClient(_sorter), ByteRenderer(bridge=bridge), Sampling()))
    assert trace.reward == 1.0 and trace.turns == 3
    assert len(trace.branches) == (1 if bridge else 3)
    for b in trace.branches:
        assert len(b.token_ids) == len(b.sampled_mask) == len(b.logprobs) == len(b.roles)
    # the sampled tokens are exactly the replies the client returned, in order
    sampled = [t for b in trace.branches for t, s in zip(b.token_ids, b.sampled_mask, strict=False) if s]
    replies = [m["content"] for m in trace.messages if m["role"] == "assistant"]
    assert sampled == [t for r in replies for t in (*r.encode(), END)]
    assert [m["role"] for m in trace.messages].count("assistant") == 3


def test_alphabet_sort_wrong_second_turn_lowers_reward():
    ts = AlphabetSort(AlphabetSort.Config(num_train=3, num_turns=2))
    task = next(iter(ts.tasks("train")))
    only_first = lambda msgs: "\n".join(sorted(msgs[1]["content"].splitlines()[1:]))  # noqa: E731
    trace = run(ts.rollout(task, ScriptedClient(only_first), ByteRenderer(), Sampling()))
    assert trace.metrics["turn_0"] == 1.0 and trace.metrics["turn_1"] < 1.0
    assert trace.reward == pytest.approx((1.0 + trace.metrics["turn_1"]) / 2)


def _always(action_for_options):
    def policy(msgs):
        text = last_user(msgs)
        for opts, act in action_for_options.items():
            if opts in text:
                return act
        return "?"

    return policy


def test_kuhn_poker_showdown_rewards_follow_the_cards():
    ts = KuhnPoker(KuhnPoker.Config(num_train=6))
    policy = _always({"check or bet": "I bet", "call or fold": "call"})
    for task in ts.tasks("train"):
        trace = run(ts.rollout(task, ScriptedClient(policy), ByteRenderer(), Sampling()))
        cards = task.data["cards"]
        p1_wins = "JQK".index(cards["player1"]) > "JQK".index(cards["player2"])
        assert trace.metrics["showdown"] == 1.0
        assert trace.agent_rewards["player1"] == (1.0 if p1_wins else 0.0)
        assert trace.agent_rewards["player2"] == (0.0 if p1_wins else 1.0)
        assert {b.agent for b in trace.branches} == {"player1", "player2"}


def test_kuhn_poker_invalid_move_is_penalised():
    ts = KuhnPoker(KuhnPoker.Config(num_train=1))
    task = next(iter(ts.tasks("train")))
    trace = run(ts.rollout(task, ScriptedClient(lambda m: "raise!"), ByteRenderer(), Sampling()))
    assert trace.metrics["invalid"] == 1.0 and trace.agent_rewards == {"player1": 0.0, "player2": 0.75}


def test_proposer_solver_rewards_mixed_outcomes():
    assert evaluate("3 + 4 * 2", 20, 3) == (11, 2)
    assert evaluate("3 + + 4", 20, 3) is None and evaluate("7", 20, 3) is None and evaluate("30 + 1", 20, 3) is None
    ts = ProposerSolver(ProposerSolver.Config(num_train=2, num_solvers=4))
    task = next(iter(ts.tasks("train")))
    calls = {"n": 0}

    def policy(msgs):
        if msgs[0]["content"].startswith("You write"):
            return "3 + 4 * 2"
        calls["n"] += 1
        return "11" if calls["n"] % 2 else "14"

    trace = run(ts.rollout(task, ScriptedClient(policy), ByteRenderer(), Sampling()))
    solver_rewards = sorted(v for k, v in trace.agent_rewards.items() if k.startswith("solver/"))
    assert solver_rewards == [0.0, 0.0, 1.0, 1.0]
    assert trace.agent_rewards["proposer"] == 1.0 and trace.reward == 0.5
    assert len(trace.branches) == 5

    invalid = run(ts.rollout(task, ScriptedClient(lambda m: "no idea"), ByteRenderer(), Sampling()))
    assert invalid.metrics["valid"] == 0.0 and invalid.agent_rewards == {"proposer": 0.0}


def test_proposer_solver_seeded_solvers_sample_apart():
    """A deterministic run seeds each episode once; its solvers must not all reuse that seed,
    or (same prompt, same seed) they always agree and no solver baseline has anything to learn."""
    ts = ProposerSolver(ProposerSolver.Config(num_train=1, num_solvers=3))
    task = next(iter(ts.tasks("train")))
    seeds: list[int | None] = []

    class SeededClient(ScriptedClient):
        async def generate(self, prompt_ids, sampling):
            seeds.append(sampling.seed)
            return await super().generate(prompt_ids, sampling)

    # the solvers' reply depends on the seed, as a sampling server's does: seed % 7
    client = SeededClient(lambda m: "2 + 3" if m[0]["content"].startswith("You write") else str(seeds[-1] % 7))
    trace = run(ts.rollout(task, client, ByteRenderer(), Sampling(seed=2048)))
    assert seeds[0] == 2048  # the proposer keeps the episode's seed
    assert len({s % 2**32 for s in seeds}) == 4  # apart in the low 32 bits, all a torch generator keeps
    assert sorted(v for k, v in trace.agent_rewards.items() if k.startswith("solver/")) == [0.0, 0.0, 1.0]
