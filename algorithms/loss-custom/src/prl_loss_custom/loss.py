"""Custom loss: a user function computes the per-token rl loss.

``[trainer.loss] type = "custom"`` with ``import_path`` naming a function and ``kwargs`` its
keyword arguments:

    def my_loss(inputs: prl.contracts.loss.LossInputs, **kwargs) -> LossOutputs: ...

``inputs`` holds 1-D tensors for one micro-batch: ``trainer_logprobs`` (the only ones with
gradient), ``inference_logprobs``, ``ref_logprobs`` (or None), ``advantages``,
``loss_mask`` (already narrowed by the trainer to the rl tokens: rl weight ≠ 0) and
``rl_weights``. The function returns ``LossOutputs(loss, metrics)``: ``loss`` per token (or
its sum), multiplied by the rl weight and not normalised; the trainer divides the step's
total by the global sum of rl weights. A bare tensor is accepted as ``loss`` with no metrics.

The function is imported when the loss is built (in the trainer), and the kwargs are
checked against its signature then, so a typo fails at start-up, not at the first step.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Literal

from pydantic import field_validator

from prl.contracts.loss import Loss, LossConfig, LossInputs, LossOutputs
from prl_loss_custom.importing import check_import_path, load_callable


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
        out = self.fn(inputs, **self.config.kwargs)
        if isinstance(out, LossOutputs):
            return out
        if hasattr(out, "sum") and hasattr(out, "backward"):
            return LossOutputs(loss=out)
        raise TypeError(
            f"import_path '{self.config.import_path}' returned {type(out).__name__}; "
            "expected LossOutputs(loss, metrics) or a tensor"
        )
