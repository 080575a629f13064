"""A supervised warm start for multi-agent learning runs on kuhn-poker.

A randomly initialised byte-level model never writes a legal Kuhn poker action, so every
hand ends at player1's first reply with the same rewards and no algorithm has anything to
learn from. Like a real run, the learning run starts from a policy that sometimes
succeeds: here the tiny model fitted to conversations whose replies are drawn uniformly
from the four action words, which are legal about half the time (the options depend on
what the opponent did). Whole conversations with eight replies each are rendered by the
run's own renderer, so the replies are learnt in the long contexts RL samples them in.
About 320 steps reach well-formed words; that takes minutes on two CPU cores.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from prl.testing.distill import fit_rows

WORDS = ("check", "bet", "call", "fold")
SOLVER_SYSTEM = "Compute the value. Reply with the number only."  # proposer-solver's solver prompt


def _note(rng: random.Random) -> dict:
    other, move = rng.choice(("player1", "player2")), rng.choice(("check", "bet"))
    legal = ("call", "fold") if move == "bet" else ("check", "bet")
    return {"role": "user", "content": f"{other} chose to {move}. Your options: {' or '.join(legal)}."}


def kuhn_conversations(rng: random.Random, n: int, turns: int = 8) -> list[list[dict]]:
    """``n`` conversations: a real opening prompt, then ``turns`` random action words, each
    followed by a real-looking note on the opponent's move (so every reply is in history)."""
    from prl_tasks_builtin.kuhn_poker import _intro

    out = []
    for _ in range(n):
        player = rng.choice(("player1", "player2"))
        messages = _intro(player, rng.choice("JQK"))
        if player == "player2":
            messages.append(_note(rng))
        for _ in range(turns):
            messages += [{"role": "assistant", "content": rng.choice(WORDS)}, _note(rng)]
        out.append(messages)
    return out


def fit(model_dir: Path, conversations: list[list[dict]], steps: int, lr: float, batch: int = 4) -> None:
    """Train the model in ``model_dir`` on the assistant turns (cross-entropy) and save it."""
    from prl.plugins import get_registry

    renderer = get_registry().get("renderers", "auto").Config().build(tokenizer=str(model_dir))
    rows = []
    for messages in conversations:
        rendered = renderer.render(messages)
        pairs = zip(rendered.token_ids, rendered.roles, strict=True)
        rows.append((rendered.token_ids, [t if role == "assistant" else -100 for t, role in pairs]))
    fit_rows(model_dir, rows, steps, lr, batch)


def kuhn_warm_start(model_dir: Path) -> None:
    """The warm start the kuhn-poker learning run was measured with: 120 steps at lr 2e-2,
    then 200 at 1e-2, on 200 conversations."""
    conversations = kuhn_conversations(random.Random(0), 200)
    fit(model_dir, conversations, steps=120, lr=2e-2)
    fit(model_dir, conversations, steps=200, lr=1e-2)


def proposer_solver_warm_start(model_dir: Path, max_number: int, max_ops: int, steps: int = 160) -> None:
    """The proposer-solver run's warm start: the proposer's prompts answered with random
    well-formed expressions and the solvers' with their exact values, 200 tasks, ``steps``
    at lr 2e-2 (batch 8).

    A random tiny model never writes a valid expression, so no solver is ever asked and
    every reward is 0. After this the proposer writes valid problems nearly always and the
    solvers answer partly right (about one in eight), so hierarchical_grpo has solvers of
    one problem that disagree, and the solvers' reward can rise."""
    from prl_tasks_builtin.proposer_solver import ProposerSolver, evaluate

    reply, rng = replies(model_dir), random.Random(0)
    taskset = ProposerSolver(ProposerSolver.Config(max_number=max_number, max_ops=max_ops))
    rows = []
    for task in [t for _, t in zip(range(200), taskset.tasks("train"), strict=False)]:
        numbers = [str(rng.randint(0, max_number)) for _ in range(task.data["ops"] + 1)]
        problem = numbers[0] + "".join(rng.choice("+-*") + n for n in numbers[1:])
        value, _ = evaluate(problem, max_number, max_ops)
        ask = [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": problem}]
        rows += [reply(task.prompt, problem), reply(ask, str(value))]
    fit_rows(model_dir, rows, steps=steps, lr=2e-2, batch=8)


def replies(model_dir: Path) -> Callable[[list[dict], str], tuple[list[int], list[int]]]:
    """A training row maker: (messages, reply) -> (ids, labels) with the messages rendered by
    the model's chat template and its generation prompt, exactly as sampling sees them, and
    only the reply and its end-of-turn token scored."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    end = tok.convert_tokens_to_ids("<|im_end|>")

    def row(messages: list[dict], reply: str) -> tuple[list[int], list[int]]:
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = tok.encode(text, add_special_tokens=False)
        answer = tok.encode(reply, add_special_tokens=False) + [end]
        return prompt + answer, [-100] * len(prompt) + answer

    return row


def demo_warm_start(model_dir: Path, template: str, count: int = 32) -> None:
    """opsd's warm start: reply "yes" when the prompt shows the answer (``template``) and "no"
    when it does not, on ``count`` reverse-text training prompts (300 steps at lr 1e-2).

    A random tiny model barely reads its context (its KL between the two prompts is ~0.003
    nats), so self-distillation would have nothing to close; after this the shown answer
    changes the reply and opsd must move the plain prompt's reply towards it. The prompts
    are the model's chat template with its generation prompt, as opsd's reference sees them.

    120 steps sit on an edge: on one machine the model learnt to read the demonstration, on
    another (same code, same seeds) it learnt one reply for both prompts (KL ~1e-5) and opsd
    had nothing to close. 200 steps still missed for 2 seeds of 3; 300 gave KLs of 8-11
    nats for every seed and learning rate tried."""
    from prl_algo_opsd import demo_messages
    from prl_tasks_builtin.reverse_text import ReverseText

    reply = replies(model_dir)
    tasks = [t for _, t in zip(range(count), ReverseText(ReverseText.Config()).tasks("train"), strict=False)]
    rows = []
    for task in tasks:
        rows += [reply(task.prompt, "no"), reply(demo_messages(task.prompt, task.data["answer"], template), "yes")]
    fit_rows(model_dir, rows, steps=300, lr=1e-2)


def reverse_warm_start(model_dir: Path, steps: int = 60, count: int = 200) -> None:
    """The RL runs' warm start: a brief fit to reverse-text answers (one word, ``steps`` at
    lr 1e-2), which leaves a policy that writes short, partly right reversals and stops.

    From random weights two CPU minutes of RL move the policy (entropy ~5.7 -> 2) but hardly
    its reward (~0.08 -> 0.10, within its noise); from a policy that sometimes succeeds the
    reward itself rises, as in a real run started from an instruction-tuned model."""
    from prl_tasks_builtin.reverse_text import ReverseText

    taskset = ReverseText(ReverseText.Config(max_words=1))
    tasks = [t for _, t in zip(range(count), taskset.tasks("train"), strict=False)]
    reply = replies(model_dir)
    fit_rows(model_dir, [reply(t.prompt, t.data["answer"]) for t in tasks], steps=steps, lr=1e-2)
