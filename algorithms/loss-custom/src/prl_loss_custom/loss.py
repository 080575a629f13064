"""Custom loss: a user function computes the per-token rl loss.

``[trainer.loss] type = "custom"`` with ``import_path`` naming a function and ``kwargs`` its
keyword arguments:

    def my_loss(inputs: prl.contracts.loss.LossInputs, **kwargs) -> LossOutputs: ...

The function is called once per training sample (a packed micro-batch is split on its
``seq_lens``). ``inputs`` holds that sample's 1-D tensors: ``trainer_logprobs`` (the only
ones with gradient), ``inference_logprobs``, ``ref_logprobs`` (or None), ``advantages``,
``loss_mask`` (already narrowed by the trainer to the rl tokens: rl weight ≠ 0) and
``loss_weights`` (the rl weights; also reachable as ``rl_weights``). The function returns
``LossOutputs(loss, metrics)``: ``loss`` per token (or its sum), multiplied by the rl weight
and not normalised; the trainer divides the step's total by the global sum of rl weights.
A bare tensor is accepted as ``loss`` with no metrics. Over a micro-batch the samples'
losses are summed and each metric is averaged over the samples that report it.

The function is imported when the loss is built (in the trainer), and the kwargs are
checked against its signature then, so a typo fails at start-up, not at the first step.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar, Literal

from pydantic import field_validator

from prl.contracts.loss import Loss, LossConfig, LossInputs, LossOutputs
from prl.importing import check_import_path, load_callable
from prl.lazy import lazy_import

torch = lazy_import("torch")  # registry loads must stay torch-free


class CustomLoss(Loss):
    """Delegates the rl loss to a function named by ``import_path``."""

    type: ClassVar[str] = "custom"

    class Config(LossConfig):
        """``[trainer.loss] type = "custom"``."""

        type: Literal["custom"] = "custom"
        """Selects this loss."""
        import_path: str
        """The loss function: 'pkg.mod.fn', 'pkg.mod:fn' or 'path/file.py:fn'."""
        kwargs: dict[str, Any] = {}
        """Keyword arguments passed to the function on every call."""

        @field_validator("import_path")
        @classmethod
        def _shape(cls, value: str) -> str:
            return check_import_path(value)

    config: Config

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.fn = load_callable(config.import_path)
        try:
            inspect.signature(self.fn).bind(None, **config.kwargs)
        except TypeError as exc:
            raise ValueError(f"kwargs do not fit import_path '{config.import_path}': {exc}") from None
        except ValueError:  # builtins without a signature: checked at call time instead
            pass

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        """Call the function once per packed sample; sum the losses, average the metrics."""
        # Samples without rl tokens add nothing and would hand the function empty selections.
        samples = split_samples(inputs)
        samples = [x for x, keep in zip(samples, _with_rl_tokens(inputs, samples), strict=True) if keep] or [inputs]
        outs = [self._one(sample) for sample in samples]
        if len(outs) == 1:
            return outs[0]
        loss = sum(out.loss.sum() for out in outs)
        metrics = {}
        for name in {name for out in outs for name in out.metrics}:
            values = [out.metrics[name].float().mean() for out in outs if name in out.metrics]
            metrics[name] = sum(values) / len(values)
        return LossOutputs(loss=loss, metrics=metrics)

    def _one(self, inputs: LossInputs) -> LossOutputs:
        out = self.fn(inputs, **self.config.kwargs)
        if isinstance(out, LossOutputs):
            return out
        if hasattr(out, "sum") and hasattr(out, "backward"):
            return LossOutputs(loss=out)
        raise TypeError(
            f"import_path '{self.config.import_path}' returned {type(out).__name__}; "
            "expected LossOutputs(loss, metrics) or a tensor"
        )


def _with_rl_tokens(inputs: LossInputs, samples: list[LossInputs]) -> list[bool]:
    """Which of ``samples`` have rl tokens: the trainer's host-side ``rl_samples`` when given,
    else asked of the device in one read for all of them (one per sample would make the host
    wait for the GPU once per sample)."""
    if inputs.rl_samples is not None and len(inputs.rl_samples) == len(samples):
        return list(inputs.rl_samples)
    return torch.stack([x.loss_mask.any() for x in samples]).tolist()


def split_samples(inputs: LossInputs) -> list[LossInputs]:
    """One ``LossInputs`` per sample of a packed micro-batch (``seq_lens``), views not copies;
    the inputs themselves when they hold one sample."""
    if not inputs.seq_lens or len(inputs.seq_lens) == 1:
        return [inputs]
    parts: dict[str, Any] = {}
    for f in dataclasses.fields(inputs):
        value = getattr(inputs, f.name)
        if f.name not in ("seq_lens", "rl_samples") and value is not None:
            parts[f.name] = value.split(inputs.seq_lens)
    return [LossInputs(**{name: chunks[i] for name, chunks in parts.items()}) for i in range(len(inputs.seq_lens))]
