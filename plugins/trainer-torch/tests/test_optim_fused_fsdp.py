"""The fused AdamW a GPU run builds must step FSDP2's sharded parameters (DTensors) and
match the default AdamW. Run here on the CPU over gloo (the fused kernel exists there too;
DTensor's handling of the fused op is the same on every device), in a child process so
its process group leaves the test process alone."""

from __future__ import annotations

import subprocess
import sys

from prl.serving import free_port

CHILD = r"""
import os, sys, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from prl_trainer_torch.config import OptimConfig
from prl_trainer_torch.optim import build_optimizer

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
results = []
for device in (torch.device("cuda"), torch.device("cpu")):  # fused (a GPU run), then the default
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = build_optimizer(model.parameters(), OptimConfig(lr=0.1), 0.01, None, device)
    assert isinstance(next(model.parameters()), torch.distributed.tensor.DTensor)
    for _ in range(3):
        model(torch.randn(4, 8, generator=torch.Generator().manual_seed(1))).square().sum().backward()
        opt.step()
        opt.zero_grad()
    results.append((opt.param_groups[0]["fused"], [p.full_tensor() for p in model.parameters()]))
(fused, trained), (default, expected) = results
assert fused is True and not default
for a, b in zip(trained, expected):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
print("ok")
dist.destroy_process_group()
"""


def test_fused_adamw_steps_sharded_parameters_like_the_default():
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(free_port("127.0.0.1"))], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
