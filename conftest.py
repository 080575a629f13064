"""Workspace-wide test settings: how `make test` shares the tests between its two workers.

`make test` runs pytest-xdist with ``--dist loadgroup``: most tests go to whichever worker is
free, but tests that share one expensive, machine-wide thing stay on one worker, one after
the other:

* ``slurm``: the real-SLURM tests share one session cluster (munged, slurmctld, three
  slurmd); two workers would start two clusters of root daemons side by side.
* ``vllm``: each vLLM engine on CPU spins OpenMP threads on every core; two engines at once
  starve each other (and the other worker's tests) far beyond the cost of running in turn,
  and the vLLM plugin's tests share one session server.
"""

from __future__ import annotations

import os

import pytest

# No test reaches the real Hugging Face Hub: a hub name that a test does not serve from its
# own local hub (the `local_hub` fixture) meets a closed loopback port, as a user without
# network would. Set before any test module imports huggingface_hub, which reads it once.
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")


def _group(item: pytest.Item) -> str | None:
    if "slurm_cluster" in getattr(item, "fixturenames", ()):
        return "slurm"
    if item.get_closest_marker("vllm") is not None:
        return "vllm"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
