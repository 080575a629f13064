"""Registers the builtin offline tasksets with prl."""

from prl import hookimpl
from prl_tasks_builtin.alphabet_sort import AlphabetSort
from prl_tasks_builtin.coloured_shapes import ColouredShapes
from prl_tasks_builtin.kuhn_poker import KuhnPoker
from prl_tasks_builtin.proposer_solver import ProposerSolver
from prl_tasks_builtin.reverse_text import ReverseText


@hookimpl
def prl_register_tasksets():
    return [ReverseText, AlphabetSort, KuhnPoker, ProposerSolver, ColouredShapes]
