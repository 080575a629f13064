"""proposer-solver: a proposer writes an arithmetic problem, solvers answer it.

Each task asks the proposer for an expression with at most ``max_ops`` operators over
integers 0..``max_number`` using ``+ - *`` (the target difficulty varies per task). The
expression is the proposer's answer text; prl evaluates it exactly (own parser, no eval).
Then ``num_solvers`` independent solver conversations are asked for its value (in a seeded
run each with its own seed, see ``solver_sampling``).

Rewards (agent ids: ``proposer``, ``solver/0`` … ``solver/<n-1>``; the role is the part
before ``/``):

* ``solver/i``: 1.0 when the last integer in its reply equals the value, else 0.0;
* ``proposer``: 0.0 for an invalid problem, else ``1 - |2·s - 1|`` where ``s`` is the
  solvers' success rate: problems that some but not all solvers get right earn the most.

``trace.reward`` is the mean solver reward (0.0 for an invalid problem). Metrics:
``valid``, ``solve_rate``, ``ops``.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Annotated, Literal

from pydantic import Field

from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.contracts.taskset import Task, Taskset, TasksetConfig
from prl.tasks import Conversation, episode_trace, extract_answer, last_int, with_default_max_tokens
from prl.types import Sampling, Trace

_TOKEN = re.compile(r"\s*(\d+|[-+*])")


def evaluate(expr: str, max_number: int, max_ops: int) -> tuple[int, int] | None:
    """Value and operator count of ``n (op n)+`` with ``*`` binding tighter; None if invalid."""
    parts, pos, text = [], 0, expr.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            return None
        parts.append(m.group(1))
        pos = m.end()
    if len(parts) % 2 == 0 or not all(p.isdigit() for p in parts[::2]) or any(p.isdigit() for p in parts[1::2]):
        return None
    numbers = [int(p) for p in parts[::2]]
    ops = parts[1::2]
    if not 1 <= len(ops) <= max_ops or any(n > max_number for n in numbers):
        return None
    terms = [numbers[0]]  # fold products first, then sum the signed terms
    for op, n in zip(ops, numbers[1:], strict=False):
        if op == "*":
            terms[-1] *= n
        else:
            terms.append(n if op == "+" else -n)
    return sum(terms), len(ops)


SOLVER_SEED_STRIDE = 0x9E3779B1
"""Seed distance between an episode's solvers: odd and below 2**32, since samplers seed 32-bit
generators (torch's CPU generator keeps only a seed's low 32 bits)."""


def solver_sampling(sampling: Sampling, index: int) -> Sampling:
    """Solver ``index``'s sampling. A seeded run (``orchestrator.deterministic``) gives one seed
    per episode; the solvers share one prompt, so with that one seed they would all write the
    same reply, never disagree, and leave every per-problem baseline with nothing to compare."""
    if sampling.seed is None:
        return sampling
    return replace(sampling, seed=(sampling.seed + (index + 1) * SOLVER_SEED_STRIDE) % 2**63)


class ProposerSolver(Taskset):
    """A proposer agent makes a problem and solver agents answer it."""

    id = "proposer-solver"
    in_process = True
    splits = ("train", "eval", "test")

    class Config(TasksetConfig):
        """proposer-solver taskset."""

        id: Literal["proposer-solver"] = "proposer-solver"
        """Taskset id."""
        num_train: Annotated[int, Field(ge=1)] = 2000
        """Examples in the train split."""
        num_eval: Annotated[int, Field(ge=1)] = 100
        """Examples in the eval split."""
        num_solvers: Annotated[int, Field(ge=1)] = 4
        """Solver attempts per proposed problem."""
        max_number: Annotated[int, Field(ge=1)] = 20
        """Largest number allowed in a problem."""
        max_ops: Annotated[int, Field(ge=1)] = 3
        """Most operators allowed in a problem."""
        seed: int = 0
        """Data seed (train uses 2·seed, eval 2·seed+1)."""
        max_tokens: Annotated[int, Field(ge=1)] = 32
        """Completion bound per turn when the run's sampling leaves max_tokens unset."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        split = "eval" if split == "test" else split  # one held-out split, by either name
        c = self.config
        count = {"train": c.num_train, "eval": c.num_eval}.get(split)
        if count is None:
            raise ValueError(f"proposer-solver has splits 'train' and 'eval', not '{split}'")
        rng = random.Random(2 * c.seed + (split == "eval"))
        for i in range(count):
            ops = rng.randint(1, c.max_ops)
            text = (
                f"Write one arithmetic expression with exactly {ops} operator(s) from + - * and integers "
                f"from 0 to {c.max_number}. Make it tricky but solvable. Reply with the expression only."
            )
            prompt = [
                {"role": "system", "content": "You write short arithmetic problems."},
                {"role": "user", "content": text},
            ]
            yield Task(task_id=f"{split}/{i}", prompt=prompt, data={"ops": ops})

    async def rollout(self, task: Task, client: InferenceClient, renderer: Renderer, sampling: Sampling) -> Trace:
        c = self.config
        sampling = with_default_max_tokens(sampling, c.max_tokens)
        proposer = Conversation(renderer, task.prompt, agent="proposer")
        problem = extract_answer(await proposer.sample(client, sampling))
        parsed = evaluate(problem, c.max_number, c.max_ops)
        rewards: dict[str, float] = {}
        solvers: list[Conversation] = []
        if parsed is not None:
            value, _ = parsed
            ask = [
                {"role": "system", "content": "Compute the value. Reply with the number only."},
                {"role": "user", "content": problem},
            ]
            solvers = [Conversation(renderer, ask, agent=f"solver/{i}") for i in range(c.num_solvers)]
            samples = (s.sample(client, solver_sampling(sampling, i)) for i, s in enumerate(solvers))
            replies = await asyncio.gather(*samples)
            for solver, reply in zip(solvers, replies, strict=False):
                rewards[solver.agent] = float(last_int(reply) == value)
        solve_rate = sum(rewards.values()) / len(rewards) if rewards else 0.0
        rewards["proposer"] = 1.0 - abs(2.0 * solve_rate - 1.0) if parsed is not None else 0.0
        return episode_trace(
            task,
            proposer,
            *solvers,
            reward=solve_rate,
            agent_rewards=rewards,
            metrics={
                "valid": float(parsed is not None),
                "solve_rate": solve_rate,
                "ops": float(parsed[1] if parsed else 0),
            },
            env=self.id,
        )
