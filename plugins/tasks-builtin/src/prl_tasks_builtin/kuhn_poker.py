"""kuhn-poker: two policy-sampled agents play one hand of Kuhn poker.

Rules: a deck of J < Q < K, one card each, both ante 1 chip. player1 checks or bets 1.
After a check, player2 checks (showdown for 1) or bets; facing a bet a player calls
(showdown for 2) or folds (the bettor wins 1). The higher card wins a showdown.

Each agent has its own conversation and sees only its own card. A reply's action is the
first legal action word in it (case-insensitive, inside ``<answer>`` when present); a
reply with none is an invalid move that ends the hand: the offender is scored -2 chips
and the opponent +1.

Rewards: ``agent_rewards[player] = (chips + 2) / 4`` in [0, 1]; ``trace.reward`` is their
mean (0.5 for every valid zero-sum hand), so per-agent algorithms must read
``agent_rewards`` keyed by ``Branch.agent``. Metrics: ``player1_chips``, ``invalid``,
``showdown``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import Field

from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.contracts.taskset import Task, Taskset, TasksetConfig
from prl.tasks import Conversation, episode_trace, extract_answer, with_default_max_tokens
from prl.types import Sampling, Trace

RANK = {"J": 0, "Q": 1, "K": 2}
DEALS = list(itertools.permutations("JQK", 2))
SYSTEM = (
    "You play Kuhn poker: deck J < Q < K, one card each, both players ante 1 chip. "
    "Players may check, bet 1, call or fold. Reply with exactly one action word."
)


def parse_action(text: str, legal: tuple[str, ...]) -> str | None:
    words = re.findall(r"[a-z]+", extract_answer(text).lower())
    return next((w for w in words if w in legal), None)


class KuhnPoker(Taskset):
    """One hand of Kuhn poker between two policy-sampled players."""

    id = "kuhn-poker"
    in_process = True
    splits = ("train", "eval", "test")

    class Config(TasksetConfig):
        """kuhn-poker taskset."""

        id: Literal["kuhn-poker"] = "kuhn-poker"
        """Taskset id."""
        num_train: Annotated[int, Field(ge=1)] = 600
        """Hands in the train split (the 6 deals, cycled)."""
        num_eval: Annotated[int, Field(ge=1)] = 60
        """Hands in the eval split."""
        max_tokens: Annotated[int, Field(ge=1)] = 16
        """Completion bound per decision when the run's sampling leaves max_tokens unset."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        split = "eval" if split == "test" else split  # one held-out split, by either name
        count = {"train": self.config.num_train, "eval": self.config.num_eval}.get(split)
        if count is None:
            raise ValueError(f"kuhn-poker has splits 'train' and 'eval', not '{split}'")
        for i in range(count):
            p1, p2 = DEALS[i % len(DEALS)]
            yield Task(
                task_id=f"{split}/{i}", prompt=_intro("player1", p1), data={"cards": {"player1": p1, "player2": p2}}
            )

    async def rollout(self, task: Task, client: InferenceClient, renderer: Renderer, sampling: Sampling) -> Trace:
        sampling = with_default_max_tokens(sampling, self.config.max_tokens)
        cards = task.data["cards"]
        seats = {
            "player1": Conversation(renderer, task.prompt, agent="player1"),
            "player2": Conversation(renderer, _intro("player2", cards["player2"]), agent="player2"),
        }
        hand = _Hand(seats, client, sampling)
        chips, invalid, showdown = await hand.play(cards)
        rewards = {p: (c + 2) / 4 for p, c in chips.items()}
        return episode_trace(
            task,
            seats["player1"],
            seats["player2"],
            reward=sum(rewards.values()) / 2,
            agent_rewards=rewards,
            metrics={"player1_chips": float(chips["player1"]), "invalid": float(invalid), "showdown": float(showdown)},
            env=self.id,
        )


class _Hand:
    """Plays the betting rounds; each decision asks the acting player's conversation."""

    def __init__(self, seats: dict[str, Conversation], client: InferenceClient, sampling: Sampling) -> None:
        self.seats, self.client, self.sampling = seats, client, sampling

    async def act(self, player: str, note: str | None, legal: tuple[str, ...]) -> str | None:
        conv = self.seats[player]
        if note is not None:
            conv.add({"role": "user", "content": f"{note} Your options: {' or '.join(legal)}."})
        return parse_action(await conv.sample(self.client, self.sampling), legal)

    async def play(self, cards: dict[str, str]) -> tuple[dict[str, int], bool, bool]:
        """Returns (chips won per player, invalid move?, showdown?)."""
        first = await self.act("player1", None, ("check", "bet"))
        if first is None:
            return {"player1": -2, "player2": 1}, True, False
        second = await self.act(
            "player2", f"player1 chose to {first}.", ("call", "fold") if first == "bet" else ("check", "bet")
        )
        if second is None:
            return {"player1": 1, "player2": -2}, True, False
        if second == "fold":
            return {"player1": 1, "player2": -1}, False, False
        if second in ("check", "call"):
            return _showdown(cards, 1 if second == "check" else 2), False, True
        third = await self.act("player1", "player2 chose to bet.", ("call", "fold"))
        if third is None:
            return {"player1": -2, "player2": 1}, True, False
        if third == "fold":
            return {"player1": -1, "player2": 1}, False, False
        return _showdown(cards, 2), False, True


def _showdown(cards: dict[str, str], stake: int) -> dict[str, int]:
    p1_wins = RANK[cards["player1"]] > RANK[cards["player2"]]
    return {"player1": stake if p1_wins else -stake, "player2": -stake if p1_wins else stake}


def _intro(player: str, card: str) -> list[dict[str, str]]:
    text = f"You are {player}. Your card is {card}."
    if player == "player1":
        text += " You act first. Your options: check or bet."
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
