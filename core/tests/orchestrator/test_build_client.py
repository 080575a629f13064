"""The inference client the orchestrator and `prl eval` build: which model every request names."""

from __future__ import annotations

from prl.config.components import OrchestratorConfig
from prl.config.roots import EvalConfig
from prl.orchestrator.run import build_client


def test_eval_config_without_lora_names_its_model():
    # prl eval's [model] has no lora field; the shared client must still build (it once
    # raised AttributeError: 'ModelConfig' object has no attribute 'lora').
    client = build_client(EvalConfig.model_validate({"model": {"name": "models/tiny-sft"}}))
    assert client.model == "models/tiny-sft"


def test_orchestrator_names_the_adapter_of_a_lora_run():
    plain = OrchestratorConfig.model_validate({"model": {"name": "base"}})
    assert build_client(plain).model == "base"
    lora = OrchestratorConfig.model_validate({"model": {"name": "base", "lora": {"rank": 4, "name": "adapter-x"}}})
    assert build_client(lora).model == "adapter-x"
