"""opd: token weights, the teacher's prefill scores as ref_logprobs, and start-up errors."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prl_algo_opd import OPD, scored_logprobs
from pydantic import ValidationError

from prl.frozen import FrozenModelError
from prl.orchestrator.samples import trace_to_samples
from prl.serving import free_port
from prl.types import Branch, Trace


def _trace(reward: float = 0.5) -> Trace:
    # prompt 10 11 | sampled 12 13 | env observation 14 | sampled 15
    branch = Branch(
        token_ids=[10, 11, 12, 13, 14, 15],
        sampled_mask=[False, False, True, True, False, True],
        logprobs=[0.0, 0.0, -1.0, -2.0, 0.0, -0.5],
    )
    return Trace("t0", "task", "env", [branch], reward=reward)


def _opd(url: str = "http://127.0.0.1:9", **teacher) -> OPD:
    return OPD(OPD.Config(teacher={"name": "teacher", "base_url": url, "startup_timeout": 0, **teacher}))


def test_sampled_tokens_feed_ref_kl_only_and_the_reward_plays_no_part():
    group = [_trace(1.0), _trace(0.0)]
    _opd().score_group(group)
    for trace in group:
        b = trace.branches[0]
        assert b.ref_kl_weights == [0, 0, 1, 1, 0, 1]
        assert b.advantages == [0.0] * 6 and b.rl_weights == [0.0] * 6 and b.ce_weights == [0.0] * 6
    # The trainer sees a ref_kl-only sample whose loss mask is exactly the sampled tokens.
    group[0].branches[0].ref_logprobs = [0.0, -1, -2, -3, -4, -5]
    sample = trace_to_samples(group[0], seq_len=64).samples[0]
    assert sample.loss_mask == [False, False, True, True, False, True]
    assert sample.ref_logprobs == [0.0, -1, -2, -3, -4, -5]


def test_samples_from_the_policy_and_requires_a_teacher():
    assert _opd().sampling_source() == "policy"
    with pytest.raises(ValidationError, match="teacher"):
        OPD.Config()
    with pytest.raises(ValidationError, match="base_url"):
        OPD.Config(teacher={"name": "t"})


def test_first_token_score_is_none_and_becomes_zero():
    assert scored_logprobs([None, -1.5, -0.25]) == [0.0, -1.5, -0.25]


class _Stub(BaseHTTPRequestHandler):
    """A server that answers the generate route as told by the class attribute ``reply``."""

    reply: tuple[int, dict] = (404, {"error": {"message": "Not Found"}})
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        status, payload = self.reply(body) if callable(self.reply) else self.reply
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    def _serve(reply):
        handler = type(
            "Handler", (_Stub,), {"reply": staticmethod(reply) if callable(reply) else reply, "requests": []}
        )
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}", handler

    servers: list[ThreadingHTTPServer] = []
    yield _serve
    for server in servers:
        server.shutdown()


def test_a_teacher_that_is_down_is_one_error_naming_the_field_and_url():
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    with pytest.raises(FrozenModelError) as err:
        asyncio.run(_opd(url).start())
    message = err.value.message
    assert message.startswith(f"orchestrator.train.algo.teacher: no server answers at {url}")
    assert "\n" not in message


def test_a_server_without_the_generate_route_is_named(stub):
    url, _ = stub((404, {"detail": "Not Found"}))
    with pytest.raises(FrozenModelError, match=r"generate answered 404 .*prompt_logprobs"):
        asyncio.run(_opd(url).start())


def test_a_server_that_returns_no_prompt_logprobs_is_named(stub):
    # An OpenAI-style server that serves the route but ignores prompt_logprobs.
    url, _ = stub((200, {"choices": [{"token_ids": [4], "logprobs": None, "finish_reason": "length"}]}))
    with pytest.raises(FrozenModelError, match=rf"teacher: the server at {url} returned no usable prompt_logprobs"):
        asyncio.run(_opd(url).start())


def test_ref_logprobs_are_the_teachers_prefill_scores_of_each_distilled_branch(stub):
    def score(body):
        ids = body["token_ids"]
        assert body["sampling_params"]["max_tokens"] == 1 and body["model"] == "teacher"
        entries = [None] + [{str(t): {"logprob": -t / 10}} for t in ids[1:]]
        return 200, {"choices": [{"token_ids": [0], "finish_reason": "length"}], "prompt_logprobs": entries}

    url, handler = stub(score)
    algo = _opd(url)
    group = [_trace(), _trace()]
    group[1].branches.append(Branch([7, 8], [False, False], [0.0, 0.0]))  # nothing sampled: not scored

    async def run():
        await algo.start()
        algo.score_group(group)
        await algo.ref_logprobs(group, None, None, None)
        await algo.close()

    asyncio.run(run())
    for trace in group:
        assert trace.branches[0].ref_logprobs == pytest.approx([0.0, -1.1, -1.2, -1.3, -1.4, -1.5])
    assert group[1].branches[1].ref_logprobs is None
    assert len(handler.requests) == 3  # the start-up probe, then one per distilled branch
