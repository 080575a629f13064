"""prl-tasks-builtin: offline, in-process tasksets that need no downloads.

``reverse-text`` (single turn), ``alphabet-sort`` (multi-turn), ``kuhn-poker`` (two
policy-sampled agents) and ``proposer-solver`` (a proposer and several solvers). Every
rollout renders prompts with the run's renderer, samples token-in/token-out through the
inference client and records exact token ids, sampled masks and logprobs per branch.
"""

from prl_tasks_builtin.alphabet_sort import AlphabetSort
from prl_tasks_builtin.kuhn_poker import KuhnPoker
from prl_tasks_builtin.proposer_solver import ProposerSolver
from prl_tasks_builtin.reverse_text import ReverseText

__all__ = ["AlphabetSort", "KuhnPoker", "ProposerSolver", "ReverseText"]
