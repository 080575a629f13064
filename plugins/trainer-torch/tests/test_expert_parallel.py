"""Expert parallelism (``model.ep``) on the tiny-moe preset (Qwen3-MoE, 8 experts, top-2),
two or four torchrun ranks over gloo on the CPU.

ep = 2 splits each MoE layer's experts between two ranks and moves tokens with
all-to-all; against ep = 1 (FSDP2 alone) on the same ranks and batch it must give the same
loss and, gathered, the same gradients. The two differ only in the order float32 sums are
taken (an expert's tokens arrive in another order, its output is mixed back per token), so
the tolerance is float32 round-off: losses to a relative 1e-6, gradients to
``rtol=1e-5, atol=1e-7`` (gradients here are up to about 5e-3; observed differences are
below 1e-7). Checkpoints of an ep = 2 run hold the full expert tensors: they export to the
transformers layout, resume with either ep, and the weights published to inference are
whole.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch
from prl_trainer_torch.expert_parallel import ExpertParallelExperts, clip_grad_norm, install_expert_parallel
from prl_trainer_torch.export import export_checkpoint
from prl_trainer_torch.model import load_hf_model
from prl_trainer_torch.trainer import TorchTrainer
from typer.testing import CliRunner

from prl import torchrun
from prl.cli.main import app
from prl.config.errors import ConfigError

WORKER = Path(__file__).with_name("ep_ranks.py")
LOSS_RTOL = 1e-6
GRAD_TOL = {"rtol": 1e-5, "atol": 1e-7}
FAKE = {"type": "fake", "seq_len": 32, "batch_size": 4}
EXPERT_KEY = "model.layers.{}.mlp.experts.{}.gate_proj.weight"
# Runs compared weight for weight use SGD: its update is linear in the gradient, so a wrong
# gradient (or gradient scale) shows in the weights, and round-off stays round-off. AdamW's
# first update is about lr * sign(gradient), which turns round-off in a near-zero gradient
# coordinate into a difference of up to 2 * lr.
SGD = {"type": "sgd", "lr": 0.5}


@pytest.fixture(scope="session")
def tiny_moe_model(tmp_path_factory) -> Path:
    """The tiny-moe preset (here, not in conftest.py, whose edits re-run mutation)."""
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", "tiny-moe", seed=0)


def _ranks(model: Path, out: Path, world: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = torchrun.command([str(WORKER), str(model), str(out)], nproc=world)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_ep2_gives_the_loss_and_gradients_of_ep1(tmp_path, tiny_moe_model, world):
    """world 2: one EP group; world 4: two groups, whose expert gradients are summed across
    groups, and expert gradients on another mesh than FSDP's when clipping."""
    res = _ranks(tiny_moe_model, tmp_path / "out.pt", world)
    one = res["ep1"]
    # each rank holds 4 of the 8 experts of every layer, and tokens did cross ranks
    assert one["local_shapes"] == [] and res["ep2"]["local_shapes"] == [(4, 512, 192)] * 4
    assert res["ep2"]["remote_pairs"] > 0
    experts = [k for k in one["grads"] if ".experts." in k]
    assert len(experts) == 8 and all(one["grads"][k].abs().max() > 0 for k in experts)
    assert one["norm"] > 2 * 0.5  # the clipping below is active
    for name in ("ep2", "ep2-ac"):
        two = res[name]
        assert two["loss"] == pytest.approx(one["loss"], rel=LOSS_RTOL), name
        assert two["norm"] == pytest.approx(one["norm"], rel=1e-5), name
        for kind in ("grads", "clipped"):
            assert two[kind].keys() == one[kind].keys()
            for key, grad in one[kind].items():
                torch.testing.assert_close(
                    two[kind][key], grad, **GRAD_TOL, msg=lambda m, n=f"{name} {kind} {key}": f"{n}: {m}"
                )


def _with_ep(model, ep: int):
    return type(model).model_validate({**model.model_dump(), "ep": ep})


def _metric_rows(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if r.get("producer") == "trainer" and "optim/lr" in r}


def _sft(sft_config, tmp_path, model, name: str, ep: int, steps: int, resume: bool = False) -> None:
    extra = {"resume": {}} if resume else {}
    cfg = sft_config(
        tmp_path, model, "unused", run={"name": name}, num_workers=2, data=FAKE, ckpt={"interval": 1},
        max_steps=steps, monitors={"file": {}}, optim=SGD, **extra,
    )  # fmt: skip
    cfg.model = _with_ep(cfg.model, ep)
    assert TorchTrainer.run_sft(cfg) == 0


@pytest.mark.slow
def test_ep2_checkpoints_resume_and_export_as_ep1(tmp_path, tiny_moe_model, sft_config):
    """An ep = 2 run stopped at step 2 and resumed to step 3 logs what an ep = 1 run logs;
    its exports load in transformers, in the per-expert checkpoint layout, and give the
    ep = 1 model's logits."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    _sft(sft_config, tmp_path, tiny_moe_model, "one", ep=1, steps=3)
    _sft(sft_config, tmp_path, tiny_moe_model, "two", ep=2, steps=2)
    _sft(sft_config, tmp_path, tiny_moe_model, "two", ep=2, steps=3, resume=True)
    one, two = (_metric_rows(tmp_path / "outputs" / n) for n in ("one", "two"))
    assert sorted(two) == [1, 2, 3]
    for step in (1, 2, 3):
        for key in ("loss/mean", "optim/grad_norm"):
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-5), (step, key)
    ids = torch.tensor([[256, 10, 20, 30, 40, 257, 65, 66, 67, 258]])
    init = AutoModelForCausalLM.from_pretrained(tiny_moe_model).eval()
    for step in (2, 3):  # step 2: written by ep = 2 before the resume; step 3: after it
        logits = []
        for name in ("one", "two"):
            ckpt = tmp_path / "outputs" / name / "checkpoints" / f"step_{step}"
            out = export_checkpoint(ckpt, tmp_path / f"hf-{name}-{step}", dtype="float32")
            keys = load_file(out / "model.safetensors").keys()
            assert {EXPERT_KEY.format(layer, e) for layer in range(4) for e in range(8)} <= keys
            hf = AutoModelForCausalLM.from_pretrained(out).eval()
            with torch.no_grad():
                logits.append(hf(ids).logits)
        torch.testing.assert_close(
            logits[1], logits[0], rtol=1e-4, atol=1e-5, msg=lambda m, step=step: f"step {step}: {m}"
        )
        with torch.no_grad():
            assert (logits[1] - init(ids).logits).abs().max() > 1e-2  # trained, not the initial model


def _rl_sample(completion: list[int], advantage: float):
    from prl.types import TrainingSample

    mask = [False] * 6 + [True] * len(completion)
    return TrainingSample(
        input_ids=[256, 10, 20, 30, 40, 257, *completion],
        loss_mask=mask,
        advantages=[advantage if x else 0.0 for x in mask],
        inference_logprobs=[-math.log(320) if x else 0.0 for x in mask],
        temperature=1.0,
        rl_weights=[1.0 if x else 0.0 for x in mask],
        ce_weights=[0.0] * len(mask),
        ref_kl_weights=[0.0] * len(mask),
        env_name="alpha",
    )


@pytest.mark.slow
def test_ep2_rl_publishes_whole_experts(tmp_path, tiny_moe_model, rl_config, weight_consumer):
    """RL with ep = 2: the step's loss and grad norm are ep = 1's, and the weights published
    to inference hold every expert, one 2-D tensor each, equal to ep = 1's."""
    pytest.importorskip("prl_weights_filesystem")
    pytest.importorskip("prl_loss_ipo")
    from prl.orchestrator.packing import pack
    from prl.orchestrator.transport import write_batch

    samples = [_rl_sample(c, a) for c, a in (([65, 66, 258], 1.0), ([90, 91, 92, 93, 258], -1.0), ([70, 258], 0.5))]
    published, rows = {}, {}
    for ep in (1, 2):
        name = f"ep{ep}"
        cfg = rl_config(tmp_path, tiny_moe_model, run={"name": name}, max_steps=1, num_workers=2, optim=SGD)
        cfg.model = _with_ep(cfg.model, ep)
        run_dir = tmp_path / "outputs" / name
        write_batch(run_dir, 1, pack(samples, seq_len=24, ranks=2))
        consumer = weight_consumer(run_dir, [0, 1])
        consumer.start()
        assert TorchTrainer.run_rl(cfg) == 0
        consumer.join(60)
        assert consumer.error is None, consumer.error
        published[ep] = consumer.weights[1]
        lines = (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()
        (rows[ep],) = [r for r in map(json.loads, lines) if r.get("producer") == "trainer" and "loss/all" in r]
    for key in ("loss/all", "optim/grad_norm"):
        assert rows[2][key] == pytest.approx(rows[1][key], rel=1e-5), key
    assert published[2].keys() == published[1].keys()
    assert {EXPERT_KEY.format(layer, e) for layer in range(4) for e in range(8)} <= published[2].keys()
    for key, value in published[1].items():
        torch.testing.assert_close(published[2][key], value, rtol=1e-5, atol=1e-6, msg=lambda m, key=key: f"{key}: {m}")


@pytest.mark.parametrize(
    ("model", "flags", "message"),
    [
        ("tiny", ["--num-workers", "2", "--model.ep", "2"], "--model.ep: {tiny} is a dense model"),
        ("moe", ["--num-workers", "3", "--model.ep", "3"], "--model.ep: 3 does not divide the 8 experts"),
        ("moe", ["--model.ep", "2"], "model.ep: 2 does not divide the 1 trainer workers (num_workers)"),
        ("moe", ["--num-workers", "4", "--model.ep", "8"], "model.ep: 8 does not divide the 4 trainer workers"),
    ],
)
def test_bad_ep_is_a_one_line_usage_error(tmp_path, tiny_model, tiny_moe_model, model, flags, message):
    path = tiny_model if model == "tiny" else tiny_moe_model
    argv = ["sft", "--model.name", str(path), "--data.type", "fake", "--output-dir", str(tmp_path), "--dry-run"]
    res = CliRunner().invoke(app, [*argv, *flags])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Config file error: "), res.output
    assert message.format(tiny=tiny_model) in lines[0]


def test_ep_that_fits_dry_runs(tmp_path, tiny_moe_model):
    argv = ["sft", "--model.name", str(tiny_moe_model), "--data.type", "fake", "--output-dir", str(tmp_path)]
    for flags in (["--num-workers", "2", "--model.ep", "2"], ["--num-workers", "4", "--model.ep", "2"]):
        res = CliRunner().invoke(app, [*argv, "--dry-run", *flags])
        assert res.exit_code == 0, (flags, res.output)
    sft = json.loads(next(tmp_path.glob("*/configs/attempt_1/resolved/sft.json")).read_text())
    assert sft["model"]["ep"] == 2


def test_the_trainer_refuses_ep_the_loaded_model_cannot_take(tiny_model, tiny_moe_model):
    """``prl trainer @ file`` skips the CLI's check: the loaded model is checked again."""
    dense = load_hf_model(str(tiny_model), torch.float32, "sdpa")
    with pytest.raises(ConfigError, match=r"^model\.ep: .* has no MoE experts to split"):
        install_expert_parallel(dense, 2, str(tiny_model))
    moe = load_hf_model(str(tiny_moe_model), torch.float32, "sdpa")
    with pytest.raises(ConfigError, match=r"^model\.ep: 3 does not divide the 8 experts"):
        install_expert_parallel(moe, 3, str(tiny_moe_model))
    before = {k: v.clone() for k, v in moe.state_dict().items()}
    assert install_expert_parallel(moe, 2, str(tiny_moe_model)) == 4
    # same parameter names and values: checkpoints and exports keep the transformers keys
    assert sum(isinstance(m, ExpertParallelExperts) for m in moe.modules()) == 4
    after = moe.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


def test_clip_on_one_mesh_is_torchs_own():
    """Without EP (or with the experts on FSDP's mesh) clipping is torch's, bit for bit."""
    torch.manual_seed(0)
    grads = [torch.randn(5, 3) * 4 for _ in range(3)]
    ours, torchs = ([torch.nn.Parameter(torch.zeros(5, 3)) for _ in grads] for _ in range(2))
    for a, b, g in zip(ours, torchs, grads, strict=True):
        a.grad, b.grad = g.clone(), g.clone()
    norm = clip_grad_norm(ours, 1.0)
    assert torch.equal(norm, torch.nn.utils.clip_grad_norm_(torchs, 1.0)) and float(norm) > 1.0
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours, torchs, strict=True))
    assert float(torch.linalg.vector_norm(torch.stack([a.grad.norm() for a in ours]))) == pytest.approx(1.0, rel=1e-5)
