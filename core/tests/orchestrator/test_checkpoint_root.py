"""The orchestrator resumes from the checkpoints where ``ckpt.output_dir`` put them."""

from __future__ import annotations

from types import SimpleNamespace as NS

from prl import layout
from prl.config.sections import CkptConfig, ResumeConfig
from prl.orchestrator import checkpoint as orch_ckpt


def test_resume_finds_the_newest_step_under_ckpt_output_dir(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    for step in (2, 4):
        step_dir = layout.step_dir(elsewhere, step)
        for part in layout.COMPONENTS["rl"]:
            layout.begin(step_dir, part)
            layout.mark_complete(step_dir, part)
    config = NS(resume=ResumeConfig(), ckpt=CkptConfig(output_dir=elsewhere))
    assert orch_ckpt.resume_dir(config, tmp_path / "run") == elsewhere / "step_4"
