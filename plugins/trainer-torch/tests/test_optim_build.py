"""Which optimizer a config builds, with which learning rate, betas and weight decay, and
the full-offload combinations that are refused."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch
from prl_trainer_torch.config import OptimConfig
from prl_trainer_torch.offload import EPS, CPUStateAdamW, FullOffload
from prl_trainer_torch.optim import build_optimizer

from prl.config.errors import ConfigError


def params():
    return [torch.nn.Parameter(torch.ones(2))]


def group(opt) -> dict:
    return opt.param_groups[0]


def test_weight_decay_is_the_trainers_default_unless_set():
    assert group(build_optimizer(params(), OptimConfig(lr=0.1), 0.01))["weight_decay"] == 0.01
    assert group(build_optimizer(params(), OptimConfig(lr=0.1, weight_decay=0.2), 0.01))["weight_decay"] == 0.2


def test_sgd_gets_its_lr_and_weight_decay():
    opt = build_optimizer(params(), OptimConfig(type="sgd", lr=0.3, weight_decay=0.1), 0.0)
    assert type(opt) is torch.optim.SGD and group(opt)["lr"] == 0.3 and group(opt)["weight_decay"] == 0.1


def test_full_offload_builds_the_offloaded_optimizer_of_the_configured_kind():
    cfg = OptimConfig(type="signsgd", lr=0.3, weight_decay=0.1, betas=(0.8, 0.9))
    opt = build_optimizer(params(), cfg, 0.0, NS(full_offload=True, optim_cpu_offload=False))
    assert isinstance(opt, FullOffload) and opt.kind == "signsgd"
    assert (group(opt)["lr"], group(opt)["betas"], group(opt)["weight_decay"]) == (0.3, (0.8, 0.9), 0.1)


def test_full_offload_refuses_sgd_and_sharded_parameters():
    offload = NS(full_offload=True, optim_cpu_offload=False)
    with pytest.raises(ConfigError, match="^optim.type: model.full_offload supports adamw and signsgd, not sgd$"):
        build_optimizer(params(), OptimConfig(type="sgd"), 0.0, offload)
    sharded = params()
    sharded[0].to_local = lambda: sharded[0]  # an FSDP2 parameter is a DTensor
    with pytest.raises(ConfigError, match="^model.full_offload: supported with num_workers = 1 only$"):
        build_optimizer(sharded, OptimConfig(), 0.0, offload)


def test_signsgd_moves_each_weight_by_lr_against_its_gradient_sign_after_decay():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = build_optimizer([p], OptimConfig(type="signsgd", lr=0.1, weight_decay=0.5), 0.0)
    p.grad = torch.tensor([3.0, -0.5])
    opt.step()
    # θ (1 − ηλ) − η sign(g): 1 · 0.95 − 0.1 and −2 · 0.95 + 0.1
    torch.testing.assert_close(p.detach(), torch.tensor([0.85, -1.8]))
    # Again ±η however the gradient's size changed (Adam's first step is ±η too, its second not).
    p.grad = torch.tensor([0.1, 4.0])
    opt.step()
    torch.testing.assert_close(p.detach(), torch.tensor([0.85 * 0.95 - 0.1, -1.8 * 0.95 - 0.1]))


def _two_adam_steps(opt, p) -> torch.Tensor:
    # Two different gradients: Adam's first step is ±lr whatever the betas, the second is not.
    for grad in (torch.tensor([1.0, -2.0, 0.5]), torch.tensor([-3.0, 0.1, 0.5])):
        p.grad = grad
        opt.step()
    return p.detach().clone()


@pytest.mark.parametrize("offload", [False, True])
def test_adamw_steps_with_the_configured_lr_betas_and_weight_decay(offload):
    cfg = OptimConfig(lr=0.1, betas=(0.5, 0.8), weight_decay=0.3)
    p, want = (torch.nn.Parameter(torch.tensor([1.0, 2.0, -1.0])) for _ in range(2))
    # optim_cpu_offload keeps the moments on the host only when the weights are on a GPU.
    model = NS(full_offload=False, optim_cpu_offload=offload)
    opt = build_optimizer([p], cfg, 0.0, model, torch.device("cuda") if offload else None)
    assert type(opt) is (CPUStateAdamW if offload else torch.optim.AdamW)
    reference = torch.optim.AdamW([want], lr=0.1, betas=(0.5, 0.8), weight_decay=0.3, eps=EPS)
    torch.testing.assert_close(_two_adam_steps(opt, p), _two_adam_steps(reference, want))


def test_adamw_is_fused_for_a_gpu_run_only():
    # the device the run trains on decides (CPU parameters stand in: fused AdamW runs there too)
    cfg = OptimConfig(lr=0.1)
    gpu = build_optimizer(params(), cfg, 0.0, NS(full_offload=False, optim_cpu_offload=False), torch.device("cuda"))
    assert type(gpu) is torch.optim.AdamW and group(gpu)["fused"] is True
    for device in (torch.device("cpu"), None):
        cpu = build_optimizer(params(), cfg, 0.0, NS(full_offload=False, optim_cpu_offload=False), device)
        assert not group(cpu)["fused"]
    step = [torch.nn.Parameter(torch.ones(3))]
    opt = build_optimizer(step, cfg, 0.0, None, torch.device("cuda"))
    step[0].grad = torch.ones(3)
    opt.step()  # the fused update runs and moves the parameter
    assert torch.all(step[0] < 1)
