"""Config pieces shared by loss plugins."""

from __future__ import annotations

from pydantic import model_validator

from prl.contracts.loss import LossConfig


class RatioBandConfig(LossConfig):
    """A loss config whose subclass declares ``ratio_low`` and ``ratio_high``; checks that
    the band is not empty."""

    @model_validator(mode="after")
    def _band(self):
        if self.ratio_low > self.ratio_high:
            raise ValueError(f"ratio_low ({self.ratio_low}) must be <= ratio_high ({self.ratio_high})")
        return self
