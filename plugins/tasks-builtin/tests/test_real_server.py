"""Builtin tasksets, EnvSource, prl env-server and prl eval against the embedded server.

One tiny local model (prl_model_init) and one prl-inference-torch server per session; the
policy is random, so the checks are about exact tokens and bookkeeping, not reward.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_model_init")

from prl.client import InferenceHTTPClient  # noqa: E402
from prl.config.components import SourceConfig  # noqa: E402
from prl.config.roots import EvalConfig  # noqa: E402
from prl.envs import EnvSource  # noqa: E402
from prl.eval import run_eval  # noqa: E402
from prl.plugins import get_registry  # noqa: E402
from prl.types import Sampling  # noqa: E402


def _wait_file(path: Path, proc: subprocess.Popen, log: Path, seconds: float = 180.0) -> str:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"process did not publish {path.name}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return path.read_text().strip()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    from prl_model_init import make_model

    work = tmp_path_factory.mktemp("inference")
    model = str(make_model(work / "tiny", preset="tiny", seed=0))
    cfg = {
        "model": {"name": model},
        "server": {"port": 0},
        "backend": {"type": "torch", "ready_file": str(work / "ready"), "max_batch_size": 8, "max_prefill_tokens": 512},
    }
    (work / "inference.json").write_text(json.dumps(cfg))
    log = work / "server.log"
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prl_inference_torch", str(work / "inference.json")],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = _wait_file(work / "ready", proc, log)
    yield {"url": url, "model": model}
    proc.terminate()
    proc.wait(timeout=30)


def renderer_for(model: str):
    cls = get_registry().get("renderers", "auto")
    return cls(cls.Config(), model)


def _check_branch_alignment(trace):
    assert trace.ok, trace.error
    for b in trace.branches:
        assert len(b.token_ids) == len(b.sampled_mask) == len(b.logprobs)
        sampled = [lp for lp, s in zip(b.logprobs, b.sampled_mask, strict=False) if s]
        assert 0 < len(sampled)
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in sampled)


@pytest.mark.slow
def test_builtin_rollouts_carry_exact_server_tokens(server):
    renderer = renderer_for(server["model"])

    async def scenario():
        async with InferenceHTTPClient(server["url"], model=server["model"]) as client:
            rt = EnvSource(
                SourceConfig.model_validate({"name": "rt", "env": {"taskset": {"id": "reverse-text", "num_eval": 2}}}),
                "eval",
                None,
            )
            await rt.start()
            task = rt.tasks()[0]
            trace = await rt.rollout(task, client, renderer, Sampling(max_tokens=8, seed=1), 3)
            _check_branch_alignment(trace)
            (branch,) = trace.branches
            prompt = renderer.render_ids(task.prompt, add_generation_prompt=True)
            assert branch.token_ids[: len(prompt)] == prompt and not any(branch.sampled_mask[: len(prompt)])
            assert 1 <= sum(branch.sampled_mask) <= 8 and 0.0 <= trace.reward <= 1.0
            assert trace.env == "rt" and trace.policy_version == 3

            sort = EnvSource(
                SourceConfig.model_validate(
                    {"name": "as", "env": {"taskset": {"id": "alphabet-sort", "num_eval": 1, "num_turns": 2}}}
                ),
                "eval",
                None,
            )
            trace = await sort.rollout(sort.tasks()[0], client, renderer, Sampling(max_tokens=6), 0)
            _check_branch_alignment(trace)
            assert trace.turns == 2 and 1 <= len(trace.branches) <= 2

            poker = EnvSource(
                SourceConfig.model_validate({"name": "kp", "env": {"taskset": {"id": "kuhn-poker", "num_eval": 1}}}),
                "eval",
                None,
            )
            trace = await poker.rollout(poker.tasks()[0], client, renderer, Sampling(max_tokens=4), 0)
            assert trace.ok and set(trace.agent_rewards) == {"player1", "player2"}

    asyncio.run(scenario())


@pytest.mark.slow
def test_coloured_shapes_on_a_text_model_drops_the_image_part(server):
    """Today's text path: the auto renderer (qwen3 here) renders the question and leaves the
    image part out, silently; the rollout runs and is scored, the image stays in its messages."""
    renderer = renderer_for(server["model"])
    source = {"name": "cs", "env": {"taskset": {"id": "coloured-shapes", "num_eval": 1}}}

    async def scenario():
        async with InferenceHTTPClient(server["url"], model=server["model"]) as client:
            env = EnvSource(SourceConfig.model_validate(source), "eval", None)
            await env.start()
            task = env.tasks()[0]
            return task, await env.rollout(task, client, renderer, Sampling(max_tokens=4), 0)

    task, trace = asyncio.run(scenario())
    _check_branch_alignment(trace)
    prompt = renderer.tokenizer.decode(renderer.render_ids(task.prompt, add_generation_prompt=True))
    assert task.data["question"] in prompt and "data:image" not in prompt and "vision" not in prompt
    assert trace.messages[1]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")


@pytest.mark.slow
def test_env_server_serves_builtin_rollouts_over_prl_protocol(server, tmp_path):
    src = {"name": "rt", "env": {"taskset": {"id": "reverse-text", "num_eval": 2}}}
    (tmp_path / "rt.json").write_text(json.dumps(SourceConfig.model_validate(src).model_dump(mode="json")))
    log = tmp_path / "env.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prl", "env-server", "@", str(tmp_path / "rt.json")],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        address = _wait_file(tmp_path / "rt.address", proc, log)
        renderer = renderer_for(server["model"])

        async def scenario():
            async with InferenceHTTPClient(server["url"], model=server["model"]) as client:
                env = EnvSource(
                    SourceConfig.model_validate({**src, "env": {**src["env"], "serve": {"address": address}}}),
                    "eval",
                    None,
                )
                await env.start()
                trace = await env.rollout(env.tasks()[0], client, renderer, Sampling(max_tokens=8), 5)
                await env.close()
                return trace

        trace = asyncio.run(scenario())
        _check_branch_alignment(trace)
        assert trace.env == "rt" and trace.policy_version == 5
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_prl_eval_against_the_server(server, tmp_path, capsys):
    cfg = EvalConfig.model_validate(
        {
            "output_dir": str(tmp_path),
            "run": {"name": "ev"},
            "model": {"name": server["model"]},
            "client": {"base_url": server["url"]},
            "num_examples": 3,
            "group_size": 2,
            "sampling": {"max_completion_tokens": 8},
            "source": [{"name": "reverse-text", "env": {"taskset": {"id": "reverse-text"}}}],
        }
    )
    assert run_eval(cfg, tmp_path / "ev") == 0
    out = capsys.readouterr().out
    assert "Evaluated reverse-text" in out and "Reward " in out
    summary = json.loads((tmp_path / "ev" / "results" / "reverse-text.json").read_text())
    assert summary["eval/reverse-text/num_rollouts"] == 6 and 0.0 <= summary["eval/reverse-text/avg@2"] <= 1.0
    metrics = tmp_path / "ev" / "monitors" / "file" / "metrics.jsonl"
    if metrics.exists():  # the file monitor is installed: its rows carry producer "eval"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert any(r.get("producer") == "eval" and "eval/reverse-text/avg@2" in r for r in rows)
