"""``prl rl`` with two inference engines behind prl's router (``inference.server.engines =
2``): real engines (torch, and vllm-cpu where installed) on a tiny model, the real
orchestrator and trainer, two RL steps. Every weight update must reach both engines and
rollouts must be spread over both."""

from __future__ import annotations

import json
import re

import pytest

from prl.testing.configs import VLLM_CPU_FLAGS, tiny_rl_toml

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_weights_filesystem")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")


def _toml(tmp_path):
    from prl_model_init.build import make_model

    model = make_model(tmp_path / "model", preset="tiny")
    engines = {"inference": {"server": {"engines": 2, "backend_port": 0}}}
    return tiny_rl_toml(tmp_path, model, {"orchestrator": {"batch_size": 8}, "trainer": None}, engines)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("weights", "backend"),
    [
        ("filesystem", []),
        ("nccl", []),
        pytest.param("nccl", VLLM_CPU_FLAGS, marks=pytest.mark.vllm, id="vllm-nccl"),
    ],
)
def test_prl_rl_through_the_router_updates_every_engine(tmp_path, capsys, weights, backend):
    from prl.cli.commands import cmd_rl

    flags = ["--weight-broadcast.type", weights, *(["--weight-broadcast.port", "0"] if weights == "nccl" else [])]
    code = cmd_rl(["@", str(_toml(tmp_path)), "--run.name", "dp", *flags, *backend])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "[trainer] Step 2 |" in out.out
    run_dir = tmp_path / "outputs" / "dp"
    logs, resolved = run_dir / "logs" / "attempt_1", run_dir / "configs" / "attempt_1" / "resolved"
    engines = [json.loads((resolved / "inference" / f"engine_{i}.json").read_text()) for i in range(2)]
    router = json.loads((resolved / "inference.json").read_text())
    assert router["server"]["engines"] == 2 and {e["server"]["engines"] for e in engines} == {1}
    assert len({e["server"]["port"] for e in engines} | {router["server"]["port"]}) == 3
    orchestrator = json.loads((resolved / "orchestrator.json").read_text())
    assert orchestrator["client"]["base_url"].endswith(f":{router['server']['port']}")
    log = (logs / "inference.log").read_text()
    # Both engines took every version the orchestrator loaded, the last one included.
    assert "router: /update_weights: engine versions [2, 2]" in log
    assert "router: /update_weights: engine versions [1, 1]" in log
    routed = [int(n) for n in re.search(r"requests routed per engine \[(\d+), (\d+)\]", log).groups()]
    assert min(routed) > 0, routed
    for i in range(2):
        assert "listening on http://127.0.0.1:" in (logs / "inference" / f"engine_{i}.log").read_text()
    if weights == "nccl":
        trainer = json.loads((resolved / "trainer.json").read_text())
        assert trainer["weight_broadcast"]["inference_world_size"] == 2
