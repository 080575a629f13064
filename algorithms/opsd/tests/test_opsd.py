"""opsd: the demonstration prompt, reference ids and their alignment, token weights."""

from __future__ import annotations

import asyncio

import pytest
from prl_algo_opsd import OPSD, demo_messages

from prl.contracts.taskset import Task
from prl.types import Branch, Trace


class _Renderer:
    """One token per message (its content's length) plus 99 as the generation prompt."""

    tokenizer_path = "unused"

    def render_ids(self, messages, tools=None, add_generation_prompt=False):
        return [len(m["content"]) for m in messages] + ([99] if add_generation_prompt else [])


class _Policy:
    """Prefill scoring whose logprob of each token is −(its position)/10, recording requests."""

    def __init__(self):
        self.scored: list[list[int]] = []

    async def score(self, ids):
        self.scored.append(list(ids))
        return [None] + [-i / 10 for i in range(1, len(ids))]


def _task(data=None) -> Task:
    prompt = [{"role": "system", "content": "sys"}, {"role": "user", "content": "abcd"}]
    return Task("t1", prompt, {"answer": "dcba"} if data is None else data)


def _trace() -> Trace:
    # prompt 3 4 99 | sampled 7 8 | env observation 5 | sampled 6
    branch = Branch([3, 4, 99, 7, 8, 5, 6], [False, False, False, True, True, False, True], [0.0] * 7)
    return Trace("x", "t1", "env", [branch])


def test_the_demonstration_is_merged_into_the_leading_system_message():
    merged = demo_messages(_task().prompt, "dcba", "Example: {demonstration}")
    assert merged == [{"role": "system", "content": "Example: dcba\n\nsys"}, {"role": "user", "content": "abcd"}]
    alone = demo_messages([{"role": "user", "content": "q"}], "a", "Demo {demonstration}")
    assert alone == [{"role": "system", "content": "Demo a"}, {"role": "user", "content": "q"}]


def test_reference_is_the_policy_scoring_the_sample_after_the_demonstration_prompt():
    algo = OPSD(OPSD.Config(demo_key="answer", template="E {demonstration}"))
    group, policy = [_trace()], _Policy()
    algo.score_group(group)
    asyncio.run(algo.ref_logprobs(group, _task(), policy, _Renderer()))
    # demonstration prompt: system "E dcba\n\nsys" (11 chars), user "abcd" (4), generation prompt 99
    assert policy.scored == [[11, 4, 99, 7, 8, 5, 6]]
    b = group[0].branches[0]
    # positions 3.. of the reference carry the sampled tokens: −3/10, −4/10, −5/10, −6/10
    assert b.ref_logprobs == pytest.approx([0.0, 0.0, 0.0, -0.3, -0.4, -0.5, -0.6])
    assert b.ref_kl_weights == [0, 0, 0, 1, 1, 0, 1]
    assert b.advantages == [0.0] * 7 and b.rl_weights == [0.0] * 7 and b.ce_weights == [0.0] * 7


def test_a_task_without_the_demonstration_is_a_clear_error():
    algo = OPSD(OPSD.Config())  # demo_key "demonstration"; reverse-text tasks have "answer"
    group = [_trace()]
    algo.score_group(group)
    with pytest.raises(ValueError, match=r"^orchestrator.train.algo.demo_key: task t1 has no 'demonstration' .*answer"):
        asyncio.run(algo.ref_logprobs(group, _task(), _Policy(), _Renderer()))


def test_samples_from_the_policy():
    assert OPSD(OPSD.Config()).sampling_source() == "policy"
