"""sft: ce token weights, the frozen sampling source the orchestrator uses, start-up errors."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prl_algo_sft import SFT
from pydantic import ValidationError

from prl.frozen import CompletionsSampler, FrozenModelError
from prl.orchestrator.samples import trace_to_samples
from prl.orchestrator.sources import sampling_client
from prl.serving import free_port
from prl.types import Branch, Sampling, Trace

SOURCE = {"name": "frozen", "base_url": "http://127.0.0.1:9", "startup_timeout": 0}


def _sft(**source) -> SFT:
    return SFT(SFT.Config(sampling={"source": {**SOURCE, **source}}))


def _trace() -> Trace:
    branch = Branch([10, 11, 12, 13, 14], [False, True, True, False, True], [0.0, -1.0, -2.0, 0.0, -3.0])
    return Trace("t0", "task", "env", [branch], reward=0.25)


def test_frozen_models_tokens_feed_ce_only():
    trace = _trace()
    _sft().score_group([trace])
    b = trace.branches[0]
    assert b.ce_weights == [0, 1, 1, 0, 1]
    assert b.advantages == [0.0] * 5 and b.rl_weights == [0.0] * 5 and b.ref_kl_weights == [0.0] * 5
    sample = trace_to_samples(trace, seq_len=64).samples[0]
    assert sample.loss_mask == [False, True, True, False, True] and sample.rl_weights == [0.0] * 5


def test_sampling_source_is_required_and_is_the_frozen_model():
    with pytest.raises(ValidationError, match="sampling"):
        SFT.Config()
    with pytest.raises(ValidationError, match="base_url"):
        SFT.Config(sampling={"source": {"name": "x"}})
    assert _sft().sampling_source()["base_url"] == "http://127.0.0.1:9"


def test_the_orchestrator_samples_an_sft_source_from_the_frozen_model():
    # resolve_source gives a source this client; core's test_algorithm_hooks checks the
    # loop then runs that source's rollouts against it instead of the policy.
    client = sampling_client(_sft())
    assert isinstance(client, CompletionsSampler)
    assert client.base_url == "http://127.0.0.1:9" and client.model == "frozen"
    policy_algo = type("Policy", (SFT,), {"sampling_source": lambda self: "policy"})(_sft().config)
    assert sampling_client(policy_algo) is None


class _Completions(BaseHTTPRequestHandler):
    """An OpenAI-compatible stand-in: lists one model, answers completions as ``reply`` says."""

    reply: dict = {}

    def _send(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._send({"data": [{"id": "frozen"}]})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send(self.reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def completions_server():
    servers = []

    def _serve(reply: dict) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Completions,), {"reply": reply}))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield _serve
    for server in servers:
        server.shutdown()


def test_a_sampler_that_is_down_is_one_error_naming_the_field():
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    with pytest.raises(FrozenModelError) as err:
        asyncio.run(_sft(base_url=url).start())
    assert err.value.message.startswith(f"orchestrator.train.algo.sampling.source: no server answers at {url}")


def test_a_sampler_serving_another_model_is_named(completions_server):
    url = completions_server({})
    with pytest.raises(FrozenModelError, match=r"sampling.source.name: .* serves 'frozen', not 'other'"):
        asyncio.run(_sft(base_url=url, name="other").start())


def test_a_sampler_without_token_ids_is_named(completions_server):
    url = completions_server({"choices": [{"text": "hi", "finish_reason": "length"}]})
    with pytest.raises(FrozenModelError, match=r"/v1/completions with a token-id prompt did not give token ids"):
        asyncio.run(_sft(base_url=url).start())


def test_completions_become_generations(completions_server):
    reply = {"choices": [{"token_ids": [4, 5], "logprobs": {"token_logprobs": [-0.5, -1.5]}, "finish_reason": "stop"}]}
    url = completions_server(reply)

    async def run():
        await _sft(base_url=url).start()
        async with CompletionsSampler(url, model="frozen") as client:
            return await client.generate([1, 2], Sampling(max_tokens=2))

    gen = asyncio.run(run())
    assert (gen.token_ids, gen.logprobs, gen.finish_reason) == ([4, 5], [-0.5, -1.5], "stop")
