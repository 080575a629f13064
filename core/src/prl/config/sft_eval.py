"""``[eval]`` of ``prl sft``: online evaluation of the weights being trained.

The same source blocks as ``[orchestrator.eval]`` (:class:`EvalGroupConfig`), plus when the
trainer hands its weights over and what the online-eval process does with a stale one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from prl.config.components import EvalGroupConfig
from prl.config.sections import ClientConfig, ConcurrencyConfig

if TYPE_CHECKING:  # annotations only
    from prl.config.components import InferenceConfig


class SFTEvalConfig(EvalGroupConfig):
    """Online evaluation during SFT: the trainer broadcasts its weights when an eval is due
    and a separate online-eval process scores them against the inference server."""

    skip_first_step: bool = False
    """Do not evaluate the base model before the first step."""
    cancel_on_new_checkpoint: bool = True
    """Abandon an evaluation still running when newer weights arrive (the final step's
    evaluation always runs to the end)."""
    retrigger_on_resume: bool = False
    """On resume from step N, evaluate the step-N weights again (filesystem transport)."""
    concurrency: ConcurrencyConfig = Field(default_factory=lambda: ConcurrencyConfig(min_inflight=32, max_inflight=32))
    """In-flight eval rollouts (at most max_inflight)."""
    client: ClientConfig = Field(default_factory=ClientConfig)
    """Inference endpoint; with [inference] it defaults to that server's address."""

    @model_validator(mode="after")
    def _sources(self) -> SFTEvalConfig:
        if not self.source:
            raise ValueError("[eval] needs at least one [[eval.source]] block")
        names = [s.name for s in self.source]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"eval source names must be unique, repeated: {', '.join(dup)}")
        return self


def fill_inference_model(data: Any) -> Any:
    """Before validation: ``[inference]`` serves the trained model unless it names one."""
    if not isinstance(data, dict) or not isinstance(data.get("inference"), dict):
        return data
    name = (data.get("model") or {}).get("name") if isinstance(data.get("model"), dict) else None
    if name is None:
        return data
    inference = dict(data["inference"])
    model = dict(inference.get("model") or {})
    model.setdefault("name", name)
    inference["model"] = model
    return {**data, "inference": inference}


def check_sft_eval(inference: InferenceConfig | None, online_eval: SFTEvalConfig | None, model_name: str) -> None:
    """After validation: ``[inference]`` needs ``[eval]`` and the trained model; the eval
    client points at the managed server unless its base_url was given."""
    if inference is None:
        return
    if online_eval is None:
        raise ValueError("inference: [inference] without [eval] is an error (add [eval] and [[eval.source]])")
    if inference.model.name != model_name:
        raise ValueError(f"inference.model.name '{inference.model.name}' differs from model.name '{model_name}'")
    if "base_url" not in online_eval.client.model_fields_set:
        server = inference.server
        online_eval.client.base_url = f"http://{server.host}:{server.port}"
