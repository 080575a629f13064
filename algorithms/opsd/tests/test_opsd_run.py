"""opsd for real: a short ``prl rl`` run on CPU (the reference is the live policy shown the
task's answer) whose reverse KL to that reference goes down."""

from __future__ import annotations

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")

from prl.testing.configs import distill_overrides, tiny_rl_toml  # noqa: E402
from prl.testing.distill import next_token_kl, trainer_metrics  # noqa: E402

STEPS = 10
TEMPLATE = "The correct reply to the next request is: {demonstration}"


def _pairs(model_dir, split: str = "eval", count: int = 8) -> list[tuple[list[int], list[int]]]:
    """(plain prompt, prompt with the answer shown) for the first reverse-text tasks of ``split``."""
    from prl_algo_opsd import demo_messages
    from prl_tasks_builtin.reverse_text import ReverseText
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)

    def ids(messages):
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tok.encode(text, add_special_tokens=False)

    tasks = [t for _, t in zip(range(count), ReverseText(ReverseText.Config()).tasks(split), strict=False)]
    return [(ids(t.prompt), ids(demo_messages(t.prompt, t.data["answer"], TEMPLATE))) for t in tasks]


def _warm_start(model_dir, pairs, steps: int = 300) -> None:
    """Teach the student to reply "yes" when shown a demonstration and "no" without one, so
    that the demonstration changes its answer (a random tiny model barely reads its context:
    its KL between the two is ~0.003 nats). opsd must then move the plain answer to "yes".
    300 steps: at 120 the model learnt one reply for both prompts on some machines (KL
    ~1e-5, nothing for opsd to close); at 300 the KL is 8-11 nats for every seed tried."""
    from transformers import AutoTokenizer

    from prl.testing.distill import fit_rows

    tok = AutoTokenizer.from_pretrained(model_dir)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    rows = []
    for plain, demo in pairs:
        for prompt, reply in ((plain, "no"), (demo, "yes")):
            answer = tok.encode(reply, add_special_tokens=False) + [end]
            rows.append((prompt + answer, [-100] * len(prompt) + answer))
    fit_rows(model_dir, rows, steps=steps, lr=1e-2)


@pytest.mark.slow
def test_opsd_brings_the_policy_closer_to_itself_shown_the_answer(tmp_path, capsys):
    from prl_model_init import make_model

    from prl.cli.commands import cmd_rl

    student = make_model(tmp_path / "student", preset="tiny", seed=0)
    _warm_start(student, _pairs(student, split="train", count=32))
    algo = {"type": "opsd", "demo_key": "answer", "template": TEMPLATE}
    toml = tiny_rl_toml(tmp_path, student, distill_overrides(algo, STEPS), name="opsd.toml")
    code = cmd_rl(["@", str(toml), "--run.name", "opsd"])
    assert code == 0, capsys.readouterr().err[-3000:]
    run_dir = tmp_path / "outputs" / "opsd"
    kl = trainer_metrics(run_dir, "loss/ref_kl")
    assert sorted(kl) == list(range(1, STEPS + 1))
    first, last = (sum(kl[s] for s in steps) / 4 for steps in (range(1, 5), range(STEPS - 3, STEPS + 1)))
    # Exact, on held-out prompts: KL(π(·|prompt) ‖ π(·|prompt + answer)) at the first answer
    # token, before training and with the final weights.
    pairs = _pairs(student)
    before = next_token_kl(student, pairs)
    after = next_token_kl(student, pairs, run_dir / "broadcasts" / f"step_{STEPS}" / "model.safetensors")
    print(f"opsd exact KL to the demonstration-conditioned policy: {before:.4f} -> {after:.4f}; "
          f"per-step ref_kl {first:.4f} -> {last:.4f}")  # fmt: skip
    assert after < 0.8 * before
