"""Routing replay with expert parallelism: the expert-parallel layer takes the replayed
choice as it is given, so ``model.ep = 2`` (with and without activation checkpointing)
gives the loss and router gradients of ``ep = 1`` on the same recorded experts, not those
of routing by itself."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from prl import torchrun

pytestmark = pytest.mark.slow
WORKER = Path(__file__).with_name("ep_replay_ranks.py")


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory) -> Path:
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", "tiny-moe", seed=0)


def test_ep2_replays_as_ep1(tmp_path, tiny_moe):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{WORKER.parent}:{os.environ.get('PYTHONPATH', '')}"}
    cmd = torchrun.command([str(WORKER), str(tiny_moe), str(tmp_path / "out.pt")], nproc=2)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = torch.load(tmp_path / "out.pt")
    one = res["ep1"]
    assert len(one["router_grads"]) == 4 and all(g.abs().max() > 0 for g in one["router_grads"].values())
    for name in ("ep2", "ep2-ac"):
        assert res[name]["loss"] == pytest.approx(one["loss"], rel=1e-6), name
        for key, grad in one["router_grads"].items():
            torch.testing.assert_close(res[name]["router_grads"][key], grad, rtol=1e-5, atol=1e-7)
    assert abs(res["ep2-own"]["loss"] - one["loss"]) > 1e-3
