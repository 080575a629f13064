"""Which optimizer a config builds, with which learning rate, betas and weight decay, and
the full-offload combinations that are refused."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch
from prl_trainer_torch.config import OptimConfig
from prl_trainer_torch.offload import FullOffload
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
