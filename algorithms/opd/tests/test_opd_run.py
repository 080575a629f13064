"""opd for real: a teacher served by ``prl inference`` (torch backend, then vLLM) and a short
``prl rl`` run on CPU whose reverse KL to the teacher goes down."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")

from prl_algo_opd import OPD  # noqa: E402
from prl_model_init import make_model  # noqa: E402

from prl.testing.configs import distill_overrides, tiny_rl_toml  # noqa: E402
from prl.testing.distill import reverse_kl, sharpened_model, trainer_metrics  # noqa: E402
from prl.testing.servers import running_inference  # noqa: E402
from prl.types import Branch, Trace  # noqa: E402

STEPS = 16


def _contexts(model_dir, count: int = 8) -> list[list[int]]:
    """The first reverse-text eval prompts as the run renders them (with a generation prompt)."""
    from prl_tasks_builtin.reverse_text import ReverseText
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tasks = [t for _, t in zip(range(count), ReverseText(ReverseText.Config()).tasks("eval"), strict=False)]
    texts = [tok.apply_chat_template(t.prompt, add_generation_prompt=True, tokenize=False) for t in tasks]
    return [tok.encode(text, add_special_tokens=False) for text in texts]


def _opd_toml(tmp_path, student, teacher, url):
    algo = {"type": "opd", "teacher": {"name": str(teacher), "base_url": url}}
    return tiny_rl_toml(tmp_path, student, distill_overrides(algo, STEPS), name="opd.toml")


@pytest.mark.slow
def test_opd_pulls_the_student_towards_the_teacher(tmp_path, capsys):

    from prl.cli.commands import cmd_rl

    student = make_model(tmp_path / "student", preset="tiny", seed=0)
    teacher = sharpened_model(make_model(tmp_path / "base", seed=0), tmp_path / "teacher", scale=8.0)
    with running_inference(teacher, tmp_path / "teacher-server") as url:
        code = cmd_rl(["@", str(_opd_toml(tmp_path, student, teacher, url)), "--run.name", "opd"])
    assert code == 0, capsys.readouterr().err[-3000:]
    run_dir = tmp_path / "outputs" / "opd"
    kl_metric = trainer_metrics(run_dir, "loss/ref_kl")
    assert sorted(kl_metric) == list(range(1, STEPS + 1))
    contexts = _contexts(student)
    before = reverse_kl(student, teacher, contexts)
    after = reverse_kl(student, teacher, contexts, run_dir / "broadcasts" / f"step_{STEPS}" / "model.safetensors")
    first, last = (sum(kl_metric[s] for s in steps) / 4 for steps in (range(1, 5), range(STEPS - 3, STEPS + 1)))
    print(
        f"opd exact reverse KL to the teacher: {before:.3f} -> {after:.3f}; per-step ref_kl {first:.3f} -> {last:.3f}"
    )
    assert after < 0.9 * before
    assert last < 0.9 * first


def _prefill_matches_the_teachers_own_scores(url: str, teacher) -> None:
    algo = OPD(OPD.Config(teacher={"name": str(teacher), "base_url": url}))
    trace = Trace("t", "x", "env", [Branch([5, 6, 7, 8, 9], [False, False, True, True, True], [0.0] * 5)])

    async def run():
        await algo.start()
        algo.score_group([trace])
        await algo.ref_logprobs([trace], None, None, None)
        await algo.close()

    asyncio.run(run())
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(teacher, dtype=torch.float32).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([[5, 6, 7, 8, 9]])).logits[0, :-1].float(), -1)
    want = [0.0] + logp.gather(1, torch.tensor([[6], [7], [8], [9]]))[:, 0].tolist()
    assert trace.branches[0].ref_logprobs == pytest.approx(want, abs=1e-3)


@pytest.mark.slow
def test_teacher_scores_from_the_torch_backend(tmp_path):
    teacher = sharpened_model(make_model(tmp_path / "base", seed=1), tmp_path / "teacher", scale=4.0)
    with running_inference(teacher, tmp_path / "server") as url:
        _prefill_matches_the_teachers_own_scores(url, teacher)


@pytest.mark.slow
@pytest.mark.vllm
def test_teacher_scores_from_the_vllm_backend(tmp_path, monkeypatch):
    pytest.importorskip("prl_inference_vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    teacher = sharpened_model(make_model(tmp_path / "base", seed=1), tmp_path / "teacher", scale=4.0)
    flags = ["--backend.type", "vllm", "--backend.dtype", "float32", "--backend.enforce_eager", "true"]
    flags += ["--backend.max_num_seqs", "8", "--max_model_len", "512"]
    with running_inference(teacher, tmp_path / "server", *flags, timeout=600) as url:
        _prefill_matches_the_teachers_own_scores(url, teacher)


@pytest.mark.slow
def test_prl_rl_with_the_teacher_down_stops_at_start_up_naming_it(tmp_path, capsys):
    import time

    from prl.cli.commands import cmd_rl
    from prl.serving import free_port

    student = make_model(tmp_path / "student", preset="tiny", seed=0)
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    toml = _opd_toml(tmp_path, student, "teacher", url)
    started = time.monotonic()
    code = cmd_rl(["@", str(toml), "--run.name", "down", "--orchestrator.train.algo.teacher.startup_timeout", "1"])
    elapsed = time.monotonic() - started
    out = capsys.readouterr()
    assert code != 0 and elapsed < 120
    logs = (tmp_path / "outputs" / "down" / "logs" / "attempt_1" / "orchestrator.log").read_text()
    line = f"Frozen model error: orchestrator.train.algo.teacher: no server answers at {url}"
    assert line in logs + out.out + out.err
    print(f"prl rl with the teacher down ended with exit code {code} after {elapsed:.1f}s")
