"""Contract tests every inference backend must pass (``docs/inference.md``).

A backend's test module subclasses :class:`InferenceContract` and provides a fixture
``inference_server`` returning an :class:`InferenceServer` (base URL and the local model
directory it serves, usually ``prl_model_init.make_model(..., preset="tiny")``)::

    from prl.testing.inference_contract import InferenceContract, InferenceServer

    @pytest.fixture(scope="session")
    def inference_server(tmp_path_factory) -> InferenceServer: ...  # start the server

    class TestMyBackend(InferenceContract):
        logprob_atol = 1e-3

Numbers are checked against a float32 transformers forward of the same model directory
(``logprob_atol`` sets the tolerance, e.g. larger for a bf16 server). The suite changes
weights and pauses the server, and puts both back before it returns. transformers and torch
are imported inside tests only, so importing this module stays torch-free.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from prl.client import InferenceError, InferenceHTTPClient
from prl.types import Sampling


@dataclass
class InferenceServer:
    base_url: str
    model_dir: str
    model_name: str | None = None
    api_key: str | None = None

    @property
    def name(self) -> str:
        return self.model_name or self.model_dir


_REFERENCE: dict[str, Any] = {}


def reference(model_dir: str) -> tuple[Any, Any]:
    """(model, tokenizer) of ``model_dir`` in float32 on CPU, loaded once per process."""
    if model_dir not in _REFERENCE:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32").eval()
        _REFERENCE[model_dir] = (model, AutoTokenizer.from_pretrained(model_dir))
    return _REFERENCE[model_dir]


def reference_logprobs(model: Any, ids: list[int], temperature: float = 1.0) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1 under ``model`` at ``temperature``."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def _run(coro):
    return asyncio.run(coro)


class InferenceContract:
    """Behaviour shared by every backend; subclass it and provide ``inference_server``."""

    logprob_atol: float = 2e-3
    """Largest allowed |server logprob - float32 reference logprob|."""
    supports_lora: bool = True
    """Whether /load_lora_adapter is part of this backend's contract."""

    @pytest.fixture
    def server(self, inference_server: InferenceServer) -> InferenceServer:
        return inference_server

    def client(self, server: InferenceServer) -> InferenceHTTPClient:
        return InferenceHTTPClient(server.base_url, api_key=server.api_key, model=server.name, timeout=120)

    def http(self, server: InferenceServer) -> httpx.Client:
        headers = {"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
        return httpx.Client(base_url=server.base_url, timeout=120, headers=headers)

    def prompt(self, server: InferenceServer, text: str = "The quick brown fox") -> list[int]:
        return reference(server.model_dir)[1].encode(text, add_special_tokens=False)

    def assert_close(self, got: list[float], want: list[float]) -> None:
        assert len(got) == len(want)
        worst = max((abs(a - b) for a, b in zip(got, want, strict=False)), default=0.0)
        assert worst <= self.logprob_atol, f"logprobs differ from the reference by {worst:.2e}"

    # ----- discovery --------------------------------------------------------------------
    def test_health_and_models(self, server: InferenceServer) -> None:
        with self.http(server) as http:
            assert http.get("/health").status_code == 200
            ids = [m["id"] for m in http.get("/v1/models").json()["data"]]
        assert server.name in ids

    # ----- token-in/token-out -----------------------------------------------------------
    def test_generate_returns_tokens_logprobs_and_version(self, server: InferenceServer) -> None:
        async def go():
            async with self.client(server) as c:
                return await c.generate(self.prompt(server), Sampling(temperature=1.0, max_tokens=12, seed=7))

        gen = _run(go())
        assert 1 <= len(gen.token_ids) <= 12
        assert len(gen.logprobs) == len(gen.token_ids)
        assert all(lp <= 0 for lp in gen.logprobs)
        assert gen.finish_reason in ("stop", "length")
        assert isinstance(gen.version, int)

    def test_sampled_logprobs_match_reference_at_temperature(self, server: InferenceServer) -> None:
        """The logprob of a sampled token is that of softmax(logits / T), what the trainer recomputes."""
        model, _ = reference(server.model_dir)
        prompt = self.prompt(server)
        for temperature in (1.0, 0.7):
            gen = _run(self._gen(server, prompt, Sampling(temperature=temperature, max_tokens=10, seed=3)))
            want = reference_logprobs(model, prompt + gen.token_ids, temperature)[len(prompt) - 1 :]
            self.assert_close(gen.logprobs, want)

    def test_seeded_sampling_is_reproducible(self, server: InferenceServer) -> None:
        prompt = self.prompt(server, "seeded")
        a = _run(self._gen(server, prompt, Sampling(max_tokens=16, seed=1234)))
        b = _run(self._gen(server, prompt, Sampling(max_tokens=16, seed=1234)))
        assert a.token_ids == b.token_ids

    def test_max_tokens_bounds_the_completion(self, server: InferenceServer) -> None:
        with self.http(server) as http:
            body = http.post(
                "/inference/v1/generate",
                json={
                    "token_ids": self.prompt(server),
                    "model": server.name,
                    "sampling_params": {"max_tokens": 5, "ignore_eos": True, "logprobs": 0, "n": 3, "seed": 5},
                },
            ).json()
        assert len(body["choices"]) == 3
        for choice in body["choices"]:
            assert len(choice["token_ids"]) == 5 and choice["finish_reason"] == "length"

    def test_prefill_scoring_matches_reference(self, server: InferenceServer) -> None:
        model, _ = reference(server.model_dir)
        ids = self.prompt(server, "Scoring every prompt token, one at a time.")

        async def go():
            async with self.client(server) as c:
                return await c.score(ids)

        scores = _run(go())
        assert scores[0] is None and len(scores) == len(ids)
        self.assert_close(scores[1:], reference_logprobs(model, ids))

    def test_concurrent_requests_each_get_their_own_logprobs(self, server: InferenceServer) -> None:
        """Requests batched together still get exactly their own sequence's logprobs."""
        model, tok = reference(server.model_dir)
        prompts = [tok.encode(f"request {i}: " + "x" * (i % 5), add_special_tokens=False) for i in range(12)]

        async def go():
            async with self.client(server) as c:
                return await asyncio.gather(
                    *[c.generate(p, Sampling(max_tokens=6 + i % 4, seed=i)) for i, p in enumerate(prompts)]
                )

        for prompt, gen in zip(prompts, _run(go()), strict=False):
            want = reference_logprobs(model, prompt + gen.token_ids)[len(prompt) - 1 :]
            self.assert_close(gen.logprobs, want)

    # ----- OpenAI routes ----------------------------------------------------------------
    def test_chat_completion_returns_token_ids_and_logprobs(self, server: InferenceServer) -> None:
        async def go():
            async with self.client(server) as c:
                return await c.chat([{"role": "user", "content": "hi"}], Sampling(max_tokens=8, seed=1), logprobs=True)

        body = _run(go())
        choice = body["choices"][0]
        assert choice["message"]["role"] == "assistant"
        assert isinstance(choice["message"]["content"], str)
        assert 1 <= len(choice["token_ids"]) <= 8
        assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
        assert body["usage"]["completion_tokens"] == len(choice["token_ids"])

    def test_chat_stream_matches_non_stream(self, server: InferenceServer) -> None:
        req = {
            "model": server.name,
            "messages": [{"role": "user", "content": "stream me"}],
            "max_tokens": 12,
            "temperature": 0.0,
            "return_token_ids": True,
        }
        with self.http(server) as http:
            whole = http.post("/v1/chat/completions", json=req).json()["choices"][0]
            text, tokens, finish, done = "", [], None, False
            with http.stream("POST", "/v1/chat/completions", json={**req, "stream": True}) as resp:
                assert resp.status_code == 200
                for line in resp.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        done = True
                        break
                    for choice in json.loads(line[6:])["choices"]:
                        text += choice["delta"].get("content") or ""
                        tokens += choice.get("token_ids") or []
                        finish = choice.get("finish_reason") or finish
        assert done
        assert text == whole["message"]["content"]
        assert tokens == whole["token_ids"]
        assert finish == whole["finish_reason"]

    def test_completions_with_logprobs(self, server: InferenceServer) -> None:
        with self.http(server) as http:
            body = http.post(
                "/v1/completions",
                json={
                    "model": server.name,
                    "prompt": "Once upon a time",
                    "max_tokens": 6,
                    "logprobs": 1,
                    "seed": 2,
                    "return_token_ids": True,
                },
            ).json()
        choice = body["choices"][0]
        assert isinstance(choice["text"], str)
        assert len(choice["logprobs"]["token_logprobs"]) == len(choice["token_ids"])

    def test_stop_string_ends_the_text(self, server: InferenceServer) -> None:
        req = {"model": server.name, "prompt": "abc", "max_tokens": 24, "temperature": 0.0, "ignore_eos": True}
        with self.http(server) as http:
            full = http.post("/v1/completions", json=req).json()["choices"][0]["text"]
            ascii_chars = [ch for ch in full[2:] if ch.isprintable() and ch.isascii() and ch.strip()]
            if not ascii_chars:
                pytest.skip("greedy completion has no printable character to stop on")
            stop = ascii_chars[0]
            choice = http.post("/v1/completions", json={**req, "stop": [stop]}).json()["choices"][0]
        assert choice["finish_reason"] == "stop"
        assert choice["text"] == full[: full.index(stop)]

    # ----- errors -----------------------------------------------------------------------
    def test_bad_requests_get_4xx_and_the_server_keeps_serving(self, server: InferenceServer) -> None:
        prompt = self.prompt(server)
        with self.http(server) as http:
            max_len = next(m for m in http.get("/v1/models").json()["data"] if m["id"] == server.name).get(
                "max_model_len", 1_000_000
            )
            bad = [
                http.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"}),
                http.post("/v1/completions", json={"model": "no-such-model", "prompt": "x", "max_tokens": 2}),
                http.post("/v1/completions", json={"model": server.name, "prompt": "x", "max_tokens": max_len + 10}),
                http.post("/v1/completions", json={"model": server.name, "prompt": "x", "temperature": -1.0}),
                http.post(
                    "/inference/v1/generate",
                    json={"token_ids": prompt, "model": server.name, "sampling_params": {"max_tokens": max_len + 10}},
                ),
            ]
            for resp in bad:
                assert 400 <= resp.status_code < 500, (resp.status_code, resp.text[:200])
                assert "error" in resp.json() or "detail" in resp.json()
            assert http.get("/health").status_code == 200
        gen = _run(self._gen(server, prompt, Sampling(max_tokens=3)))
        assert gen.token_ids

    # ----- admin ------------------------------------------------------------------------
    def test_pause_holds_requests_until_resume(self, server: InferenceServer) -> None:
        prompt = self.prompt(server)
        results: list[Any] = []

        async def admin(call: str):
            async with self.client(server) as c:
                await getattr(c, call)()

        _run(admin("pause"))
        try:
            worker = threading.Thread(
                target=lambda: results.append(_run(self._gen(server, prompt, Sampling(max_tokens=4, seed=0))))
            )
            worker.start()
            time.sleep(1.5)
            assert worker.is_alive() and not results, "a request finished while the server was paused"
        finally:
            _run(admin("resume"))
        worker.join(timeout=60)
        assert results and results[0].token_ids

    def test_update_weights_changes_the_policy_and_version(self, server: InferenceServer, tmp_path: Path) -> None:
        import torch
        from safetensors.torch import load_file, save_file

        model, _ = reference(server.model_dir)
        ids = self.prompt(server, "weights change scores")
        original = load_file(str(Path(server.model_dir) / "model.safetensors"))
        changed = {k: (v * 1.5 if v.dim() == 2 else v).contiguous() for k, v in original.items()}
        (tmp_path / "step_1").mkdir()
        save_file(changed, str(tmp_path / "step_1" / "model.safetensors"))

        async def go():
            async with self.client(server) as c:
                before = await c.score(ids)
                version = await c.update_weights(str(tmp_path / "step_1"))
                try:
                    after = await c.score(ids)
                    gen = await c.generate(ids, Sampling(max_tokens=2, seed=0))
                finally:
                    restored = await c.update_weights(server.model_dir)
                return before, version, after, gen, restored, await c.score(ids)

        before, version, after, gen, restored, again = _run(go())
        self.assert_close(before[1:], reference_logprobs(model, ids))
        with torch.no_grad():
            twin = type(model)(model.config).eval()
            twin.load_state_dict(changed, strict=False)
            twin.tie_weights()
        self.assert_close(after[1:], reference_logprobs(twin, ids))
        assert gen.version == version
        assert restored > version
        self.assert_close(again[1:], before[1:])

    def test_update_weights_refuses_bad_directories(self, server: InferenceServer, tmp_path: Path) -> None:
        from safetensors.torch import load_file, save_file

        original = load_file(str(Path(server.model_dir) / "model.safetensors"))
        first = sorted(original)[0]
        wrong_shape = dict(original)
        wrong_shape[first] = original[first][..., :1].contiguous()
        (tmp_path / "shape").mkdir()
        save_file(wrong_shape, str(tmp_path / "shape" / "model.safetensors"))
        (tmp_path / "missing").mkdir()
        save_file({k: v for k, v in original.items() if k != first}, str(tmp_path / "missing" / "model.safetensors"))

        async def go():
            async with self.client(server) as c:
                statuses = []
                for weight_dir in (tmp_path / "nope", tmp_path / "shape", tmp_path / "missing"):
                    try:
                        await c.update_weights(str(weight_dir))
                        statuses.append(200)
                    except InferenceError as exc:
                        statuses.append(exc.status)
                return statuses, await c.health()

        statuses, healthy = _run(go())
        assert all(s is not None and 400 <= s < 500 for s in statuses), statuses
        assert healthy

    def test_lora_adapter_serves_its_own_policy(self, server: InferenceServer, tmp_path: Path) -> None:
        if not self.supports_lora:
            pytest.skip("backend does not serve LoRA adapters")
        import torch
        from safetensors.torch import save_file

        model, _ = reference(server.model_dir)
        rank, alpha = 4, 8.0
        gen = torch.Generator().manual_seed(0)
        tensors, merged = {}, {}
        for name, module in model.named_modules():
            if name.endswith(("q_proj", "v_proj")):
                a = torch.randn(rank, module.in_features, generator=gen) * 0.1
                b = torch.randn(module.out_features, rank, generator=gen) * 0.1
                tensors[f"base_model.model.{name}.lora_A.weight"] = a
                tensors[f"base_model.model.{name}.lora_B.weight"] = b
                merged[f"{name}.weight"] = module.weight + (alpha / rank) * b @ a
        save_file(tensors, str(tmp_path / "adapter_model.safetensors"))
        (tmp_path / "adapter_config.json").write_text(
            json.dumps({"r": rank, "lora_alpha": alpha, "target_modules": ["q_proj", "v_proj"], "peft_type": "LORA"})
        )
        ids = self.prompt(server, "adapter")

        async def go():
            async with self.client(server) as c:
                await c.load_lora_adapter("contract-lora", str(tmp_path))
                return await c.models(), await c.score(ids, model="contract-lora"), await c.score(ids)

        models, with_lora, base = _run(go())
        assert "contract-lora" in models
        twin = type(model)(model.config).eval()
        with torch.no_grad():
            twin.load_state_dict({**model.state_dict(), **merged})
        self.assert_close(with_lora[1:], reference_logprobs(twin, ids))
        self.assert_close(base[1:], reference_logprobs(model, ids))

    # ----- helpers ----------------------------------------------------------------------
    async def _gen(self, server: InferenceServer, prompt: list[int], sampling: Sampling):
        async with self.client(server) as c:
            return await c.generate(prompt, sampling)
