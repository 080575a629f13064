"""Registers the verifiers tasksets with prl."""

from prl import hookimpl
from prl_envs_verifiers.taskset import VerifiersTaskset, VfReverseText


@hookimpl
def prl_register_tasksets():
    return [VerifiersTaskset, VfReverseText]
