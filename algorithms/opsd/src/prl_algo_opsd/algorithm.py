"""opsd: on-policy self-distillation (``docs/distillation.md``).

Like opd, but the teacher is the **live policy** itself, shown a demonstration: for each
task, ``task.data[demo_key]`` is written into ``template`` and prepended to the task's
prompt as a system message (merged into the prompt's own system message when it starts
with one, since many chat templates take only one). The policy samples without the
demonstration; each sampled token t is then scored by the policy with it,

    loss_t = −sg(log π(y_t | demo, y_<t) − log π(y_t | y_<t)) · r̂_t

through the trainer's ref_kl component (weight 1 on sampled tokens, 0 elsewhere): the
policy learns to answer without the demonstration as it would with it. The reference is
computed by prefill scoring on the policy's own inference server (the generate route with
``prompt_logprobs``), so it follows the weights as they train; no frozen model is needed.

Scoring a branch: its tokens before the first sampled one are the prompt as rendered for
sampling; they are replaced by the demonstration prompt rendered by ``renderer`` (the run's
renderer when unset), and the rest of the branch (completions and env observations) is
kept, so multi-turn branches are scored turn for turn.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Literal

from prl_algo_opd import distill, distilled, scored_logprobs

from prl.config.sections import PluginConfig
from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.types import Branch, Trace

_RENDERERS = PluginConfig["renderers"]  # the installed renderers' config union

DEFAULT_TEMPLATE = "Here is an example of a correct answer to the next request:\n{demonstration}"


def demo_messages(prompt: list[dict], demonstration: str, template: str) -> list[dict]:
    """``prompt`` with ``template`` (its ``{demonstration}`` filled) as the leading system
    message, merged into the prompt's own system message when it has one."""
    text = template.replace("{demonstration}", demonstration)
    if prompt and prompt[0].get("role") == "system":
        return [{"role": "system", "content": f"{text}\n\n{prompt[0].get('content') or ''}"}, *prompt[1:]]
    return [{"role": "system", "content": text}, *prompt]


class OPSD(Algorithm):
    """Reverse KL to the policy conditioned on a demonstration; the ref_kl component."""

    type: ClassVar[str] = "opsd"

    class Config(AlgorithmConfig):
        """``[orchestrator.train.algo] type = "opsd"``."""

        type: Literal["opsd"] = "opsd"
        """Selects this algorithm."""
        demo_key: str = "demonstration"
        """Key of the task's data holding the demonstration (e.g. ``answer`` for reverse-text)."""
        template: str = DEFAULT_TEMPLATE
        """System message shown to the reference; ``{demonstration}`` is replaced by the demonstration."""
        renderer: _RENDERERS | None = None
        """Renderer for the demonstration prompt; the run's ``renderer`` when unset."""

    config: Config

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._renderer: Any = None

    def score_group(self, group: list[Trace]) -> None:
        for trace in group:
            distill(trace)

    def _demo_renderer(self, run_renderer: Any) -> Any:
        if self.config.renderer is None:
            return run_renderer
        if self._renderer is None:
            self._renderer = self.config.renderer.build(tokenizer=run_renderer.tokenizer_path)
        return self._renderer

    async def ref_logprobs(self, group: list[Trace], task: Any, policy: Any, renderer: Any) -> None:
        demo = (task.data or {}).get(self.config.demo_key)
        if demo is None:
            raise ValueError(
                f"orchestrator.train.algo.demo_key: task {task.task_id} has no '{self.config.demo_key}' in its data "
                f"(it has: {', '.join(sorted(task.data or {})) or 'nothing'})"
            )
        messages = demo_messages(task.prompt, str(demo), self.config.template)
        context = self._demo_renderer(renderer).render_ids(messages, add_generation_prompt=True)
        branches = distilled(group)
        scores = await asyncio.gather(*(policy.score(reference_ids(b, context)) for b in branches))
        for branch, score in zip(branches, scores, strict=True):
            branch.ref_logprobs = shifted(branch, context, scored_logprobs(score))


def first_sampled(branch: Branch) -> int:
    return next(i for i, s in enumerate(branch.sampled_mask) if s)


def reference_ids(branch: Branch, context: list[int]) -> list[int]:
    """The branch with its prompt (tokens before the first sampled one) replaced by ``context``."""
    return list(context) + list(branch.token_ids[first_sampled(branch) :])


def shifted(branch: Branch, context: list[int], scores: list[float]) -> list[float]:
    """Reference scores aligned back to the branch's own positions (0.0 on its prompt)."""
    start = first_sampled(branch)
    return [0.0] * start + scores[len(context) :]
