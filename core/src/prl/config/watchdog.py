"""``[orchestrator.watchdog]``: when a run counts as stalled (see docs/watchdog-doctor.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from prl.config.base import PrlModel


class WatchdogConfig(PrlModel):
    """Stall watchdog: names what the run waits on when no step finishes in time."""

    enabled: bool = True
    """Watch the run for stalls (a thread of the orchestrator)."""
    factor: Annotated[float, Field(gt=1)] = 5.0
    """A stall is no step for longer than factor x the median of the recent step times."""
    min_stall_s: Annotated[float, Field(gt=0)] = 60.0
    """Floor of the stall threshold, in seconds (a run of fast steps is not stalled by one slow one)."""
    first_step_s: Annotated[float, Field(gt=0)] = 600.0
    """Threshold until a step time is known (start-up, the first step's compile and warm-up)."""
