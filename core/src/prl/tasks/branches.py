"""Training branches recorded token by token.

A :class:`prl.types.Branch` is one training sample: the token ids the policy saw and
wrote, which of them it sampled (only those are trained on), the sampling logprob of each
sampled token (0.0 elsewhere) and, optionally, the role each token belongs to. The lists
must stay aligned; these helpers are the only writers :class:`~prl.tasks.Conversation`
uses, and a taskset that drives the inference client by hand (raw prompt ids, no
renderer) can use them the same way::

    branch = start_branch(prompt_ids, temperature=sampling.temperature)
    add_sampled(branch, await client.generate(prompt_ids, sampling))
"""

from __future__ import annotations

from collections.abc import Sequence

from prl.types import Branch, Generation

__all__ = ["add_observation", "add_sampled", "check_branch", "copy_branch", "start_branch"]


def start_branch(
    prompt_ids: Sequence[int], *, roles: Sequence[str] | None = None, agent: str = "default", temperature: float = 1.0
) -> Branch:
    """A branch holding only prompt tokens (not sampled, logprob 0.0)."""
    n = len(prompt_ids)
    if roles is not None and len(roles) != n:
        raise ValueError(f"{n} prompt tokens but {len(roles)} roles")
    return Branch(
        token_ids=list(prompt_ids),
        sampled_mask=[False] * n,
        logprobs=[0.0] * n,
        roles=list(roles) if roles is not None else None,
        agent=agent,
        temperature=temperature,
    )


def add_sampled(branch: Branch, generation: Generation, role: str = "assistant") -> None:
    """Append a completion exactly as the server returned it: sampled, with its logprobs."""
    ids, logprobs = generation.token_ids, generation.logprobs
    if len(logprobs) != len(ids):
        raise ValueError(f"generate returned {len(ids)} tokens but {len(logprobs)} logprobs")
    branch.token_ids.extend(ids)
    branch.sampled_mask.extend([True] * len(ids))
    branch.logprobs.extend(float(x) for x in logprobs)
    if branch.roles is not None:
        branch.roles.extend([role] * len(ids))
    _add_masks(branch, len(ids), generation.sampling_mask, generation.sampling_mask_logprobs)
    _add_routes(branch, len(ids), generation.routed_experts)


def add_observation(branch: Branch, token_ids: Sequence[int], role: str = "user") -> None:
    """Append tokens the environment supplies (a user or tool turn): never sampled."""
    branch.token_ids.extend(token_ids)
    branch.sampled_mask.extend([False] * len(token_ids))
    branch.logprobs.extend([0.0] * len(token_ids))
    if branch.roles is not None:
        branch.roles.extend([role] * len(token_ids))
    _add_masks(branch, len(token_ids), None, None)
    _add_routes(branch, len(token_ids), None)


def _add_masks(branch: Branch, n: int, masks, mask_logprobs) -> None:
    """Keep the sampling-replay lists aligned: started (empty for every earlier token) by
    the first truncated generation, then extended by every append."""
    if masks and branch.sampling_mask is None:
        before = len(branch.token_ids) - n
        branch.sampling_mask = [[] for _ in range(before)]
        branch.sampling_mask_logprobs = [[] for _ in range(before)]
    if branch.sampling_mask is None:
        return
    if masks is not None and len(masks) != n:
        raise ValueError(f"generate returned {n} tokens but {len(masks)} sampling masks")
    branch.sampling_mask.extend(list(m) for m in (masks or [[] for _ in range(n)]))
    values = mask_logprobs if masks and mask_logprobs is not None else [[] for _ in range(n)]
    branch.sampling_mask_logprobs.extend(list(v) for v in values)


def _add_routes(branch: Branch, n: int, routes) -> None:
    """Keep the routing-replay list aligned, as :func:`_add_masks` does the masks."""
    if routes and branch.routed_experts is None:
        branch.routed_experts = [[] for _ in range(len(branch.token_ids) - n)]
    if branch.routed_experts is None:
        return
    if routes is not None and len(routes) != n:
        raise ValueError(f"generate returned {n} tokens but {len(routes)} routed_experts entries")
    branch.routed_experts.extend(list(r) for r in (routes or [[] for _ in range(n)]))


def copy_branch(
    token_ids: Sequence[int],
    sampled_mask: Sequence[bool],
    logprobs: Sequence[float],
    *,
    roles: Sequence[str] | None = None,
    agent: str = "default",
    temperature: float = 1.0,
) -> Branch:
    """A branch from token lists recorded elsewhere (another framework's trace), checked."""
    branch = Branch(
        token_ids=list(token_ids),
        sampled_mask=[bool(s) for s in sampled_mask],
        logprobs=[float(x) for x in logprobs],
        roles=list(roles) if roles is not None else None,
        agent=agent,
        temperature=temperature,
    )
    check_branch(branch)
    return branch


def check_branch(branch: Branch) -> None:
    """Raise ValueError unless the token-aligned lists of ``branch`` have equal lengths.

    A misaligned branch would silently train on the wrong tokens, so it is refused here,
    where the taskset that made it is still on the stack.
    """
    n = len(branch.token_ids)
    lengths = {"sampled_mask": len(branch.sampled_mask), "logprobs": len(branch.logprobs)}
    if branch.roles is not None:
        lengths["roles"] = len(branch.roles)
    if branch.sampling_mask is not None:
        lengths["sampling_mask"] = len(branch.sampling_mask)
    if branch.routed_experts is not None:
        lengths["routed_experts"] = len(branch.routed_experts)
    wrong = {k: v for k, v in lengths.items() if v != n}
    if wrong:
        detail = ", ".join(f"{k} has {v}" for k, v in wrong.items())
        raise ValueError(f"branch of agent '{branch.agent}' has {n} token ids but {detail}")
