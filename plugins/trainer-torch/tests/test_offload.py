"""Optimizer offload on CPU: the offloaded optimizers give the same updates as torch's,
full offload trains, frees device gradients as they land, and warns that it does not clip."""

from __future__ import annotations

import logging

import pytest
import torch
from prl_trainer_torch import offload
from prl_trainer_torch.offload import CPUStateAdamW, FullOffload, SignSGD
from prl_trainer_torch.optim import build_optimizer, optimizer_step

from prl.config.components import TrainerConfig
from prl.config.errors import ConfigError


def _model(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(dtype)


def _batches(n=4):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)) for _ in range(n)]


def _loss(model, x, y):
    return ((model(x.to(next(model.parameters()).dtype)) - y) ** 2).mean()


def _train(model, opt, steps=3, micro=2, arm=False):
    data = _batches(steps * micro)
    for s in range(steps):
        for m in range(micro):
            if arm and m == micro - 1:
                opt.arm()
            _loss(model, *data[s * micro + m]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _cfg(**model):
    return TrainerConfig.model_validate({"model": model, "optim": {"lr": 1e-2, "weight_decay": 0.1}})


@pytest.mark.parametrize("arm", [True, False])
def test_full_offload_matches_adamw_without_clipping(arm):
    model, model_ref = _model(), _model()
    ref = _train(model_ref, torch.optim.AdamW(model_ref.parameters(), lr=1e-2, weight_decay=0.1))
    got = _train(model, FullOffload(model.parameters(), lr=1e-2, weight_decay=0.1), arm=arm)
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_cpu_state_adamw_matches_adamw_and_keeps_state_on_the_state_device():
    model_ref, model = _model(), _model()
    ref = _train(model_ref, torch.optim.AdamW(model_ref.parameters(), lr=1e-2, weight_decay=0.1))
    opt = CPUStateAdamW(model.parameters(), lr=1e-2, weight_decay=0.1, state_device="cpu")
    got = _train(model, opt)
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for st in opt.state.values():
        assert st["exp_avg"].device == opt.state_device and st["exp_avg"].dtype == torch.float32


@pytest.mark.parametrize("bucket", [10, 40, 1 << 26])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_state_adamw_gives_the_same_steps_whatever_the_buckets(monkeypatch, bucket, dtype):
    """Buckets of one parameter, of several, and of the whole model update alike; bf16
    parameters are updated through an fp32 copy and keep fp32 moments."""
    monkeypatch.setattr(offload, "BUCKET_NUMEL", bucket)
    runs = []
    for numel in (1 << 26, bucket):
        offload.BUCKET_NUMEL = numel
        model = _model(dtype=dtype)
        opt = CPUStateAdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        runs.append((_train(model, opt), opt))
    (ref, _), (got, opt) = runs
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert all(st["exp_avg"].dtype == torch.float32 and st["step"] == 3 for st in opt.state.values())
    assert any((st["exp_avg"] != 0).any() for st in opt.state.values())


def test_full_offload_keeps_fp32_masters_and_frees_device_gradients():
    model = _model(dtype=torch.bfloat16)
    opt = FullOffload(model.parameters(), lr=1e-2)
    _loss(model, *_batches(1)[0]).backward()
    assert all(p.grad is None for p in model.parameters())  # moved to the host as they landed
    for p in model.parameters():
        st = opt.state[p]
        assert st["master"].dtype == st["grad"].dtype == st["exp_avg"].dtype == torch.float32
        assert st["grad"].abs().sum() > 0
    before = [opt.state[p]["master"].clone() for p in model.parameters()]
    opt.step()
    for p, b in zip(model.parameters(), before, strict=True):
        master = opt.state[p]["master"]
        assert not torch.equal(master, b)
        assert torch.equal(p.detach(), master.to(torch.bfloat16))  # weights written back from the master
    assert opt.last_grad_norm > 0


def test_full_offload_trains_a_tiny_model():
    model = _model()
    opt = FullOffload(model.parameters(), lr=3e-2)
    x, y = _batches(1)[0]
    first = float(_loss(model, x, y).detach())
    for _ in range(30):
        opt.arm()
        _loss(model, x, y).backward()
        opt.step()
    assert float(_loss(model, x, y).detach()) < 0.5 * first


def test_signsgd_steps_by_the_sign_with_and_without_offload():
    model_a, model_b = _model(), _model()
    x, y = _batches(1)[0]
    start = [p.detach().clone() for p in model_a.parameters()]
    _loss(model_a, x, y).backward()
    grads = [p.grad.clone() for p in model_a.parameters()]
    SignSGD(model_a.parameters(), lr=0.1).step()
    opt = FullOffload(model_b.parameters(), lr=0.1, kind="signsgd")
    opt.arm()
    _loss(model_b, x, y).backward()
    opt.step()
    for s, g, a, b in zip(start, grads, model_a.parameters(), model_b.parameters(), strict=True):
        torch.testing.assert_close(a.detach(), s - 0.1 * g.sign())
        torch.testing.assert_close(b.detach(), a.detach())


def test_build_optimizer_picks_the_offload_mode(caplog):
    model = _model()
    assert _cfg().model.optim_cpu_offload is False and _cfg().model.full_offload is False  # the defaults
    cfg = _cfg(optim_cpu_offload=True)
    # the state is on the host already on a CPU run: plain AdamW
    assert (
        type(build_optimizer(model.parameters(), cfg.optim, 0.0, cfg.model, torch.device("cpu"))) is torch.optim.AdamW
    )
    gpu = torch.device("cuda")  # placement logic only: nothing is allocated there
    assert isinstance(build_optimizer(model.parameters(), cfg.optim, 0.0, cfg.model, gpu), CPUStateAdamW)
    off = _cfg(optim_cpu_offload=False)
    assert type(build_optimizer(model.parameters(), off.optim, 0.0, off.model, gpu)) is torch.optim.AdamW
    offload._WARNED.clear()
    full = _cfg(full_offload=True)
    with caplog.at_level(logging.WARNING, logger="prl.trainer"):
        opt = build_optimizer(model.parameters(), full.optim, 0.0, full.model, gpu)
        build_optimizer(_model().parameters(), full.optim, 0.0, full.model, gpu)
    assert isinstance(opt, FullOffload)
    warnings = [r.message for r in caplog.records if "gradient clipping is off" in r.message]
    assert len(warnings) == 1 and "optim.max_norm = 1.0 is ignored" in warnings[0]


def test_optimizer_step_reports_the_norm_full_offload_measured():
    model = _model()
    full = _cfg(full_offload=True)
    opt = build_optimizer(model.parameters(), full.optim, 0.0, full.model, torch.device("cpu"))
    _loss(model, *_batches(1)[0]).backward()
    ref = _model()
    _loss(ref, *_batches(1)[0]).backward()
    expected = float(torch.nn.utils.get_total_norm([p.grad for p in ref.parameters()]))
    assert optimizer_step(opt, model, max_norm=1e-9) == pytest.approx(expected, rel=1e-5)  # not clipped


def test_full_offload_with_sgd_is_one_line():
    cfg = TrainerConfig.model_validate({"model": {"full_offload": True}, "optim": {"type": "sgd"}})
    with pytest.raises(ConfigError, match=r"^optim.type: model.full_offload supports adamw and signsgd, not sgd$"):
        build_optimizer(_model().parameters(), cfg.optim, 0.0, cfg.model, torch.device("cpu"))


@pytest.mark.parametrize("cls", [CPUStateAdamW, FullOffload])
def test_a_resumed_optimizer_keeps_its_state_in_host_fp32(cls):
    model = _model()
    opt = cls(model.parameters(), lr=1e-2)
    _train(model, opt, steps=1, micro=1)
    saved = opt.state_dict()
    # a resume into a bf16 model: torch would cast the state to the parameters' dtype
    model16 = _model(dtype=torch.bfloat16)
    opt16 = cls(model16.parameters(), lr=1e-2)
    opt16.load_state_dict(saved)
    for i, p in enumerate(model16.parameters()):
        st = opt16.state[p]
        assert st["exp_avg"].dtype == torch.float32 and st["exp_avg"].device.type == "cpu"
        assert torch.equal(st["exp_avg"], saved["state"][i]["exp_avg"])  # not rounded through bf16
