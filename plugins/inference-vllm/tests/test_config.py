"""Config, registration and argument building (no vLLM server started)."""

from __future__ import annotations

import pytest
from prl_inference_vllm.backend import VllmArgsError, VllmBackend, parse_vllm_args
from prl_inference_vllm.config import VllmInferenceConfig, vllm_argv
from pydantic import ValidationError

from prl.config.components import InferenceConfig
from prl.config.sections import LoraConfig
from prl.plugins import get_registry
from prl.serving import is_loopback


def inference(**backend) -> InferenceConfig:
    return InferenceConfig.model_validate(
        {
            "model": {"name": "/models/tiny"},
            "server": {"host": "127.0.0.1", "port": 8123},
            "max_model_len": 256,
            "backend": {"type": "vllm", **backend},
        }
    )


def test_entry_point_registers_the_vllm_backend() -> None:
    assert get_registry().get("inference_backends", "vllm") is VllmBackend
    assert isinstance(inference().backend, VllmInferenceConfig)


def test_typed_fields_and_extra_args_become_vllm_flags() -> None:
    cfg = inference(
        gpu_memory_utilization=0.5,
        enforce_eager=True,
        enable_prefix_caching=False,
        extra_args={
            "kv-cache-dtype": "auto",
            "block_size": 32,
            "disable_log_stats": True,
            "override_generation_config": {"temperature": 0.5},
        },
    )
    argv = vllm_argv(cfg)
    pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if not argv[i + 1].startswith("--")}
    assert pairs["--model"] == "/models/tiny" and pairs["--served-model-name"] == "/models/tiny"
    assert pairs["--port"] == "8123" and pairs["--max-model-len"] == "256"
    assert pairs["--gpu-memory-utilization"] == "0.5" and pairs["--block-size"] == "32"
    assert pairs["--override-generation-config"] == '{"temperature": 0.5}'
    assert "--enforce-eager" in argv and "--no-enable-prefix-caching" in argv and "--disable-log-stats" in argv
    assert "--enable-lora" not in argv  # off by default: no flag at all


@pytest.mark.parametrize(("rank", "max_rank"), [(8, None), (16, None), (24, "32"), (64, "64")])
def test_a_lora_run_turns_lora_on_with_a_rank_that_fits(rank: int, max_rank: str | None) -> None:
    cfg = inference()
    cfg.model.lora = LoraConfig(rank=rank)
    argv = vllm_argv(cfg)
    assert "--enable-lora" in argv
    if max_rank is None:
        assert "--max-lora-rank" not in argv  # vLLM's default (16) fits
    else:
        assert argv[argv.index("--max-lora-rank") + 1] == max_rank


@pytest.mark.parametrize(
    "key, field", [("port", "server.port"), ("served-model-name", "model.name"), ("max_model_len", "max_model_len")]
)
def test_extra_args_cannot_override_settings_prl_owns(key: str, field: str) -> None:
    with pytest.raises(ValidationError, match=f"extra_args.{key} is set by prl from {field}"):
        inference(extra_args={key: 1})


def test_extra_args_cannot_duplicate_a_typed_field() -> None:
    with pytest.raises(ValidationError, match="duplicates the typed field 'gpu_memory_utilization'"):
        inference(extra_args={"gpu-memory-utilization": 0.2})


def test_out_of_range_typed_field_names_the_field() -> None:
    with pytest.raises(ValidationError, match="gpu_memory_utilization"):
        inference(gpu_memory_utilization=1.5)


def test_vllm_parses_the_arguments_and_rejects_unknown_ones() -> None:
    pytest.importorskip("vllm")
    args = parse_vllm_args(inference(max_num_seqs=7, extra_args={"block_size": 32}))
    assert args.max_num_seqs == 7 and args.block_size == 32 and args.logprobs_mode == "processed_logprobs"
    # an unknown name fails when the config is resolved, naming it ...
    with pytest.raises(ValidationError, match="extra_args.no_such_vllm_flag is not a vLLM engine or server argument"):
        inference(extra_args={"no_such_vllm_flag": 1})
    # ... and vLLM's own parser still refuses one that got past validation
    cfg = inference()
    cfg.backend = cfg.backend.model_copy(update={"extra_args": {"no_such_vllm_flag": 1}})
    with pytest.raises(VllmArgsError, match="no-such-vllm-flag"):
        parse_vllm_args(cfg)


def test_non_loopback_bind_without_api_key_refuses_to_start(monkeypatch) -> None:
    monkeypatch.delenv("PRL_API_KEY", raising=False)
    cfg = InferenceConfig.model_validate({"server": {"host": "0.0.0.0"}, "backend": {"type": "vllm"}})
    with pytest.raises(SystemExit, match="not loopback: set server.api_key"):
        VllmBackend(cfg).serve()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
