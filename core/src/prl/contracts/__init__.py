"""Abstract contracts for every plugin kind (no torch at import time).

Each implementation class carries its tag as a ``ClassVar`` (``type``, ``name``, ``key`` or
``id``, see :data:`prl.plugins.KINDS`) and a nested ``Config`` (a
:class:`prl.config.base.PluginConfigBase` subclass whose tag field is a ``Literal``), and
subclasses :class:`prl.contracts.base.Plugin`, so ``Config.build(**runtime)`` constructs it.
"""

from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.contracts.base import Plugin
from prl.contracts.inference import InferenceBackend, InferenceBackendConfig, InferenceClient
from prl.contracts.launcher import Launcher, LauncherConfig, ProcessSpec
from prl.contracts.loss import Loss, LossConfig, LossInputs, LossOutputs
from prl.contracts.monitor import Monitor, MonitorConfig
from prl.contracts.renderer import Rendered, Renderer, RendererConfig
from prl.contracts.taskset import Task, Taskset, TasksetConfig
from prl.contracts.trainer import Trainer, TrainerBackendConfig
from prl.contracts.transport import WeightTransport, WeightTransportConfig

__all__ = [
    "Algorithm",
    "AlgorithmConfig",
    "InferenceBackend",
    "InferenceBackendConfig",
    "InferenceClient",
    "Launcher",
    "LauncherConfig",
    "Plugin",
    "ProcessSpec",
    "Loss",
    "LossConfig",
    "LossInputs",
    "LossOutputs",
    "Monitor",
    "MonitorConfig",
    "Rendered",
    "Renderer",
    "RendererConfig",
    "Task",
    "Taskset",
    "TasksetConfig",
    "Trainer",
    "TrainerBackendConfig",
    "WeightTransport",
    "WeightTransportConfig",
]
