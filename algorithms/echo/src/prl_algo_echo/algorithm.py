"""echo: GRPO on the policy's actions plus cross-entropy on what the environment said
(``docs/algorithms.md``).

Action tokens (``sampled_mask`` true) are scored exactly as by :class:`prl_algo_grpo.GRPO`
(same options). In addition, every env-provided token (not sampled by the policy) whose
message role is in ``roles`` feeds the ce loss component with weight ``roles.<role>.alpha``:

    ce weight of token t = alpha(role(t))   if t was not sampled and role(t) is in ``roles``
                           0                otherwise

so the policy also learns to predict tool outputs or other observations (a world-model
auxiliary signal). Roles come from the renderer's per-token attribution (``Branch.roles``:
``system``, ``user``, ``assistant``, ``tool``, ``template``); a branch without roles gets no
ce. The default table is ``{tool: {alpha: 0.1}}``; setting any role replaces the whole
table (list ``tool`` again to keep it).

``filter`` names a function ``fn(trace, branch) -> bool`` (``pkg.mod:fn`` or
``path/file.py:fn``), imported when the algorithm is built; a branch it returns False for
gets no ce (its rl signal is unchanged), e.g. to learn only from observations of
successful episodes.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from prl_algo_grpo import GRPO
from pydantic import Field, field_validator

from prl.config.base import PrlModel
from prl.importing import check_import_path, load_callable
from prl.types import Branch, Trace


class RoleConfig(PrlModel):
    """CE weight for the env-provided tokens of one message role."""

    alpha: Annotated[float, Field(ge=0.0)] = 0.1
    """ce weight of each such token (the trainer normalises ce by token count)."""


class Echo(GRPO):
    """GRPO advantages on sampled tokens; ce with weight alpha on env tokens of chosen roles."""

    type: ClassVar[str] = "echo"
    is_default: ClassVar[bool] = False

    class Config(GRPO.Config):
        """``[orchestrator.train.algo] type = "echo"`` (and every GRPO option)."""

        type: Literal["echo"] = "echo"  # type: ignore[assignment]
        """Selects this algorithm."""
        roles: dict[str, RoleConfig] = Field(default_factory=lambda: {"tool": RoleConfig(alpha=0.1)})
        """Message roles whose env-provided tokens feed ce, with their weight; setting any
        role replaces the default table {tool: {alpha: 0.1}}."""
        filter: str | None = None
        """Optional 'pkg.mod:fn' or 'path/file.py:fn' with fn(trace, branch) -> bool; False
        keeps that branch out of ce."""

        @field_validator("filter")
        @classmethod
        def _shape(cls, value: str | None) -> str | None:
            return None if value is None else check_import_path(value)

    config: Config

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.keep = load_callable(config.filter) if config.filter else None

    def score_group(self, group: list[Trace]) -> None:
        super().score_group(group)
        for trace in group:
            for branch in trace.branches:
                if branch.roles is not None and (self.keep is None or self.keep(trace, branch)):
                    branch.ce_weights = self.ce_weights(branch)

    def ce_weights(self, branch: Branch) -> list[float]:
        """alpha of the token's role on env-provided tokens of a listed role, else 0."""
        alpha = {role: cfg.alpha for role, cfg in self.config.roles.items()}
        return [
            0.0 if sampled else alpha.get(role, 0.0)
            for sampled, role in zip(branch.sampled_mask, branch.roles, strict=True)
        ]
