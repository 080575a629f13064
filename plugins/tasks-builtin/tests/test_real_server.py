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
from prl.testing.images import png_url  # noqa: E402
from prl.types import Sampling  # noqa: E402


def _wait_file(path: Path, proc: subprocess.Popen, log: Path, seconds: float = 180.0) -> str:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"process did not publish {path.name}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return path.read_text().strip()


def _serve(tmp_path_factory, preset: str, backend: dict | None = None):
    from prl_model_init import make_model

    work = tmp_path_factory.mktemp("inference")
    model = str(make_model(work / preset, preset=preset, seed=0))
    cfg = {
        "model": {"name": model},
        "server": {"port": 0},
        "backend": {
            "type": "torch",
            "ready_file": str(work / "ready"),
            "max_batch_size": 8,
            "max_prefill_tokens": 512,
            **(backend or {}),
        },
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


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    yield from _serve(tmp_path_factory, "tiny")


@pytest.fixture(scope="module")
def vl_server(tmp_path_factory):
    yield from _serve(tmp_path_factory, "tiny-qwen3.5-vl", {"dtype": "float32"})


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


def _shapes_rollout(server, **taskset):
    renderer = renderer_for(server["model"])
    source = {"name": "cs", "env": {"taskset": {"id": "coloured-shapes", "num_eval": 2, **taskset}}}

    async def scenario():
        async with InferenceHTTPClient(server["url"], model=server["model"]) as client:
            env = EnvSource(SourceConfig.model_validate(source), "eval", None)
            await env.start()
            tasks = env.tasks()
            traces = [await env.rollout(t, client, renderer, Sampling(max_tokens=6, temperature=0.0), 0) for t in tasks]
            return tasks, traces

    return asyncio.run(scenario())


@pytest.mark.slow
def test_coloured_shapes_on_a_text_model_fails_with_the_servers_refusal(server):
    """A text model cannot see the image: the rollout fails with the server's one line,
    instead of being scored on the question alone."""
    _, (trace, _) = _shapes_rollout(server)
    assert not trace.ok
    assert "images: " in trace.error and "is a text model and cannot see images" in trace.error


@pytest.mark.slow
def test_coloured_shapes_rollouts_send_the_image_with_the_prompt(vl_server):
    """On a vision-language model the rollout's prompt goes through the token route with
    its image: the branch holds the widened prompt (16 patch tokens for the 64x64 image),
    and the sampled tokens and logprobs are the chat route's for the same messages (the chat
    route's answers equal transformers' own, test_image_content.py)."""
    import httpx

    image_token = json.loads((Path(vl_server["model"]) / "config.json").read_text())["image_token_id"]
    tasks, traces = _shapes_rollout(vl_server, question="colour", min_shapes=2, max_shapes=2)
    lps = []
    for task, trace in zip(tasks, traces, strict=True):
        _check_branch_alignment(trace)
        (branch,) = trace.branches
        assert branch.token_ids.count(image_token) == 16
        assert branch.roles[branch.token_ids.index(image_token)] == "user"
        sampled = [t for t, s in zip(branch.token_ids, branch.sampled_mask, strict=True) if s]
        body = {"messages": task.prompt, "max_tokens": 6, "temperature": 0, "logprobs": True}
        chat = httpx.post(f"{vl_server['url']}/v1/chat/completions", json=body, timeout=120).json()["choices"][0]
        assert sampled == chat["token_ids"]
        served = [e["logprob"] for e in chat["logprobs"]["content"]]
        lps.append([lp for lp, s in zip(branch.logprobs, branch.sampled_mask, strict=True) if s])
        assert lps[-1] == pytest.approx(served, abs=1e-4)
    assert lps[0] != pytest.approx(lps[1], abs=1e-4)  # two images, two answers


def _seeing(text: str, colour: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "image_url", "image_url": {"url": png_url(colour)}}]}  # fmt: skip


@pytest.mark.slow
def test_an_image_in_a_later_environment_message_reaches_the_model(vl_server):
    """Multi-turn: the environment answers the policy's first reply with a message holding a
    second image. The next turn renders the whole conversation again and sends both images;
    its branch holds both widened (2 x 16 patch tokens), and its prompt, sampled tokens and
    logprobs are the chat route's for the same messages."""
    import httpx

    from prl.tasks import Conversation

    image_token = json.loads((Path(vl_server["model"]) / "config.json").read_text())["image_token_id"]
    greedy = Sampling(max_tokens=4, temperature=0.0)

    async def scenario():
        async with InferenceHTTPClient(vl_server["url"], model=vl_server["model"]) as client:
            system = {"role": "system", "content": "Answer."}
            conv = Conversation(renderer_for(vl_server["model"]), [system, _seeing("What colour?", "red")])
            await conv.sample(client, greedy)
            conv.add(_seeing("And this one?", "blue"))
            messages = [dict(m) for m in conv.messages]
            await conv.sample(client, greedy)
            return conv, messages

    conv, messages = asyncio.run(scenario())
    assert len(conv.branches) == 2  # the image in the observation started a new render
    first, second = conv.branches
    assert first.token_ids.count(image_token) == 16 and second.token_ids.count(image_token) == 32
    assert second.images == [png_url("red"), png_url("blue")]
    body = {"messages": messages, "max_tokens": 4, "temperature": 0, "logprobs": True}
    chat = httpx.post(f"{vl_server['url']}/v1/chat/completions", json=body, timeout=120).json()
    sampled = [i for i, s in enumerate(second.sampled_mask) if s]
    assert second.token_ids[: sampled[0]] == chat["prompt_token_ids"]
    assert [second.token_ids[i] for i in sampled] == chat["choices"][0]["token_ids"]
    served = [e["logprob"] for e in chat["choices"][0]["logprobs"]["content"]]
    assert [second.logprobs[i] for i in sampled] == pytest.approx(served, abs=1e-4)


@pytest.mark.slow
def test_prl_eval_of_coloured_shapes_on_a_vision_language_model(vl_server, tmp_path):
    cfg = EvalConfig.model_validate(
        {
            "output_dir": str(tmp_path),
            "run": {"name": "ev"},
            "model": {"name": vl_server["model"]},
            "client": {"base_url": vl_server["url"]},
            "num_examples": 3,
            "sampling": {"max_completion_tokens": 6},
            "source": [{"name": "cs", "env": {"taskset": {"id": "coloured-shapes"}}}],
        }
    )
    assert run_eval(cfg, tmp_path / "ev") == 0
    summary = json.loads((tmp_path / "ev" / "results" / "cs.json").read_text())
    assert summary["eval/cs/num_rollouts"] == 3
    assert summary["eval/cs/num_failed"] == 0 and summary["failed_rollouts"] == 0, summary


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
