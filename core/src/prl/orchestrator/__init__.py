"""The RL orchestrator (torch-free): dispatch, scoring, off-policy control, packing, shipping.

:func:`prl.orchestrator.run.run_orchestrator` builds the train sources
(:class:`prl.envs.EnvSource`), the inference client, the renderer, the weight transport's consumer side and the monitors
from a resolved :class:`prl.config.components.OrchestratorConfig`, then runs
:class:`prl.orchestrator.loop.Orchestrator` until ``max_steps`` batches are shipped.
The trainer reads batches with :func:`prl.orchestrator.transport.read_batch`.
"""
