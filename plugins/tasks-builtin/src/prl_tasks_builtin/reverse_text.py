"""reverse-text: reverse a short text character by character (single turn).

Data: each example is 1..``max_words`` words drawn from a fixed vocabulary by a seeded RNG,
so the same config always yields the same tasks. The train split uses seed ``2·seed`` and
the eval split ``2·seed + 1``; eval texts that also occur in train are skipped, so the
splits are disjoint.

Reward: ``lcs_ratio(answer, reversed(text))`` (see :mod:`prl.tasks.scoring`), where
the answer is the completion's text stripped of surrounding whitespace (or the content of
an ``<answer>`` tag when present). Metrics: ``exact`` (1.0 on a perfect reversal) and
``answer_chars``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import Field

from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.contracts.taskset import Task, Taskset, TasksetConfig
from prl.tasks import Conversation, episode_trace, extract_answer, lcs_ratio, with_default_max_tokens
from prl.types import Sampling, Trace
from prl_tasks_builtin.words import WORDS

SYSTEM = "Reverse the user's text character by character. Reply with the reversed text only."


def make_texts(seed: int, count: int, min_words: int, max_words: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))) for _ in range(count)]


class ReverseText(Taskset):
    """Reverse a generated text; reward is the LCS ratio to the exact reversal."""

    id = "reverse-text"
    in_process = True
    splits = ("train", "eval", "test")

    class Config(TasksetConfig):
        """reverse-text taskset."""

        id: Literal["reverse-text"] = "reverse-text"
        """Taskset id."""
        num_train: Annotated[int, Field(ge=1)] = 10000
        """Examples in the train split."""
        num_eval: Annotated[int, Field(ge=1)] = 200
        """Examples in the eval split."""
        min_words: Annotated[int, Field(ge=1)] = 1
        """Fewest words per text."""
        max_words: Annotated[int, Field(ge=1)] = 3
        """Most words per text."""
        seed: int = 0
        """Data seed (train uses 2·seed, eval 2·seed+1)."""
        max_tokens: Annotated[int, Field(ge=1)] = 64
        """Completion bound used when the run's sampling leaves max_tokens unset."""
        system_prompt: str | None = SYSTEM
        """System message; None sends only the text."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        split = "eval" if split == "test" else split  # one held-out split, by either name
        c = self.config
        if c.min_words > c.max_words:
            raise ValueError(f"env.taskset.min_words ({c.min_words}) must not exceed max_words ({c.max_words})")
        train = make_texts(2 * c.seed, c.num_train, c.min_words, c.max_words)
        if split == "train":
            texts = train
        elif split == "eval":
            seen = set(train)
            pool = make_texts(2 * c.seed + 1, c.num_eval * 4 + 100, c.min_words, c.max_words)
            texts = [t for t in pool if t not in seen][: c.num_eval]
        else:
            raise ValueError(f"reverse-text has splits 'train' and 'eval' (or 'test'), not '{split}'")
        for i, text in enumerate(texts):
            prompt = ([{"role": "system", "content": c.system_prompt}] if c.system_prompt else []) + [
                {"role": "user", "content": text}
            ]
            yield Task(task_id=f"{split}/{i}", prompt=prompt, data={"text": text, "answer": text[::-1]})

    async def rollout(self, task: Task, client: InferenceClient, renderer: Renderer, sampling: Sampling) -> Trace:
        conv = Conversation(renderer, task.prompt)
        reply = await conv.sample(client, with_default_max_tokens(sampling, self.config.max_tokens))
        answer = extract_answer(reply)
        target = task.data["answer"]
        return episode_trace(
            task,
            conv,
            reward=lcs_ratio(answer, target),
            metrics={"exact": float(answer == target), "answer_chars": float(len(answer))},
            env=self.id,
        )
