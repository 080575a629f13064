"""prl-envs-verifiers: verifiers v1 tasksets behind verifiers' env server.

Ids: ``verifiers`` (any installed verifiers taskset, chosen by ``name``) and ``vf-<name>``
for the tasksets shipped here (``vf-reverse-text``). See :mod:`prl_envs_verifiers.taskset`.
"""

from prl_envs_verifiers.taskset import VerifiersTaskset, VfReverseText

__all__ = ["VerifiersTaskset", "VfReverseText"]
