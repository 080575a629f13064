"""prl-tasks-builtin: offline, in-process tasksets that need no downloads.

``reverse-text`` (single turn), ``alphabet-sort`` (multi-turn), ``kuhn-poker`` (two
policy-sampled agents), ``proposer-solver`` (a proposer and several solvers) and
``coloured-shapes`` (a question about a generated image). Every rollout renders prompts
with the run's renderer, samples token-in/token-out through the inference client and
records exact token ids, sampled masks and logprobs per branch.
"""

from prl_tasks_builtin.alphabet_sort import AlphabetSort
from prl_tasks_builtin.coloured_shapes import ColouredShapes
from prl_tasks_builtin.kuhn_poker import KuhnPoker
from prl_tasks_builtin.proposer_solver import ProposerSolver
from prl_tasks_builtin.reverse_text import ReverseText

__all__ = ["AlphabetSort", "ColouredShapes", "KuhnPoker", "ProposerSolver", "ReverseText"]
