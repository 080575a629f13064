"""The verifiers taskset, its task and its reward (see the package docstring)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf

from prl.tasks import extract_answer, lcs_ratio

SYSTEM = "Reverse the user's text character by character. Reply with the reversed text only."
_WORDS = (
    "amber bridge cactus dolphin ember falcon glacier harbor island jungle kettle lantern "
    "meadow nickel orbit pepper quartz raven silver tunnel umbrella velvet willow yellow"
).split()


class ReverseTextData(vf.TaskData):
    """One row: the text to reverse."""

    text: str = ""


class ReverseTextTask(vf.Task[ReverseTextData]):
    """Scores the reply against the exact reversal."""

    @vf.reward(weight=1.0)
    async def lcs(self, trace: vf.Trace) -> float:
        return lcs_ratio(extract_answer(trace.last_reply), self.data.text[::-1])

    @vf.metric
    async def exact(self, trace: vf.Trace) -> float:
        return float(extract_answer(trace.last_reply) == self.data.text[::-1])


class ReverseTextConfig(vf.TasksetConfig):
    """Rows of vf-reverse-text."""

    split: Literal["train", "eval"] = "train"
    """Which split to load (the generator seeds them apart; a file serves both)."""
    data_path: Path | None = None
    """Local JSONL file with one {"text": ...} per line; None generates rows offline."""
    num_examples: int = 1000
    """Rows to generate when data_path is None."""
    seed: int = 0
    """Generator seed."""


class ReverseTextTaskset(vf.Taskset[ReverseTextTask, ReverseTextConfig]):
    def load(self) -> list[ReverseTextTask]:
        texts = self._texts()
        return [
            ReverseTextTask(
                ReverseTextData(id=f"{self.config.split}/{i}", prompt=text, system_prompt=SYSTEM, text=text),
                self.config.task,
            )
            for i, text in enumerate(texts)
        ]

    def _texts(self) -> list[str]:
        c = self.config
        if c.data_path is not None:
            rows = [json.loads(line) for line in Path(c.data_path).read_text().splitlines() if line.strip()]
            return [str(r["text"]) for r in rows]
        rng = random.Random(2 * c.seed + (c.split == "eval"))
        return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3))) for _ in range(c.num_examples)]
