"""vf-reverse-text for real: prl env-server hosting verifiers' EnvServer, the null harness
in a subprocess runtime (uv builds its program; needs uv and PyPI on first run), and
prl's embedded inference server on a tiny local model. Select with ``-m verifiers``."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_model_init")

from prl.client import InferenceHTTPClient  # noqa: E402
from prl.config.components import SourceConfig  # noqa: E402
from prl.envs import EnvServerDied, EnvSource  # noqa: E402
from prl.plugins import get_registry  # noqa: E402
from prl.types import Sampling  # noqa: E402

pytestmark = pytest.mark.verifiers


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A fresh embedded server, or the one named by $PRL_TEST_INFERENCE_URL / _MODEL."""
    if os.environ.get("PRL_TEST_INFERENCE_URL"):
        yield {"url": os.environ["PRL_TEST_INFERENCE_URL"], "model": os.environ["PRL_TEST_INFERENCE_MODEL"]}
        return
    from prl_model_init import make_model

    work = tmp_path_factory.mktemp("inference")
    model = str(make_model(work / "tiny", preset="tiny", seed=0))
    ready = work / "ready"
    cfg = {
        "model": {"name": model},
        "server": {"port": 0},
        "backend": {"type": "torch", "ready_file": str(ready), "max_batch_size": 4, "max_prefill_tokens": 512},
    }
    (work / "inference.json").write_text(json.dumps(cfg))
    log = work / "server.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prl_inference_torch", str(work / "inference.json")],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "2"},
        )
    deadline = time.monotonic() + 180
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"inference server did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    yield {"url": ready.read_text().strip(), "model": model}
    proc.terminate()
    proc.wait(timeout=30)


def test_vf_reverse_text_rollout_through_verifiers_env_server(server, tmp_path: Path):
    cls = get_registry().get("renderers", "auto")
    renderer = cls(cls.Config(), server["model"])
    src = SourceConfig.model_validate(
        {
            "name": "vf-rt",
            "env": {
                "taskset": {"id": "vf-reverse-text", "args": {"num_examples": 2}},
                "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}},
                "timeout": 240,
            },
        }
    )
    env = EnvSource(src, "eval", tmp_path / "run", attempt_config_dir=tmp_path / "run" / "configs" / "attempt_1")

    async def scenario():
        await env.start()
        assert (tmp_path / "run" / "configs" / "attempt_1" / "resolved" / "envs" / "eval" / "vf-rt.address").exists()
        async with InferenceHTTPClient(server["url"], model=server["model"]) as client:
            trace = await env.rollout(env.tasks()[0], client, renderer, Sampling(max_tokens=8, temperature=1.0), 2)
        env._process.send_signal(signal.SIGKILL)
        env._process.wait()
        with pytest.raises(EnvServerDied, match="'vf-rt'"):
            env.check_alive()
        await env.close()
        return trace

    trace = asyncio.run(scenario())
    log = tmp_path / "run" / "logs" / "attempt_1" / "envs" / "eval" / "vf-rt.log"
    assert trace.ok, f"{trace.error}\n--- env server log ---\n{log.read_text()[-3000:]}"
    assert trace.env == "vf-rt" and trace.policy_version == 2 and 0.0 <= trace.reward <= 1.0
    assert "reward/lcs" in trace.metrics and "exact" in trace.metrics
    (branch,) = trace.branches
    assert len(branch.token_ids) == len(branch.sampled_mask) == len(branch.logprobs)
    sampled = [lp for lp, s in zip(branch.logprobs, branch.sampled_mask, strict=False) if s]
    assert 1 <= len(sampled) <= 8 and all(math.isfinite(lp) and lp <= 0 for lp in sampled)
    assert trace.messages[-1]["role"] == "assistant"
