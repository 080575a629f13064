"""The env machinery and the builtin tasksets run on CPU-only orchestrator nodes."""

import subprocess
import sys


def test_envs_eval_and_builtin_tasksets_never_import_torch():
    code = (
        "import sys, prl.envs, prl.envs.server, prl.eval, prl_tasks_builtin\n"
        "from prl.envs import EnvSource\n"
        "from prl.config.components import SourceConfig\n"
        "cfg = {'name': 'a', 'env': {'taskset': {'id': 'alphabet-sort', 'num_train': 3}}}\n"
        "s = EnvSource(SourceConfig.model_validate(cfg), 'train', None)\n"
        "assert len(s.tasks()) == 3\n"
        "print('HEAVY', [m for m in ('torch', 'transformers', 'vllm') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout
