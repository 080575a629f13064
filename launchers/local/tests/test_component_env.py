"""Per-component ``env_vars`` reach the processes the local launcher starts.

The config goes through the real resolver (a TOML file plus the reference's
``--trainer.env-vars '{...}'`` flag) and the real ``prl rl`` process plan; only each
child's program is swapped for one that records its environment, so the test needs no
model, GPU or inference server.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from prl_launcher_local import LocalLauncher

from prl.config.resolve import resolve
from prl.config.roots import RLConfig
from prl.rl_launch import build_processes

TOML = """
env_vars = {SHARED = "run", WHO = "run"}
[inference]
env_vars = {WHO = "inference", INFER_ONLY = "1"}
[inference.server]
port = 0
[orchestrator]
env_vars = {WHO = "orchestrator", OMP_NUM_THREADS = 3}
"""

# Records the environment; the inference stand-in also announces itself as a service and
# stays up until the launcher stops it.
DUMP = """
import json, os, pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text(json.dumps(dict(os.environ)))
if os.environ.get("PRL_READY_FILE"):
    pathlib.Path(os.environ["PRL_READY_FILE"]).write_text("ready")  # no URL: ready as written
    while True:
        time.sleep(0.1)
"""


def test_each_process_sees_its_own_env_vars(tmp_path):
    cfg_file = tmp_path / "rl.toml"
    cfg_file.write_text(TOML)
    argv = ["@", str(cfg_file), "--trainer.env-vars", '{"WHO": "trainer", "key1": "value1"}']
    config = resolve(RLConfig, argv).config
    config.run.name = "env-test"
    attempt, logs = tmp_path / "configs" / "attempt_1", tmp_path / "logs" / "attempt_1"
    (attempt / "resolved").mkdir(parents=True)
    specs = build_processes(config, tmp_path, attempt, logs)
    dumps = {s.name: tmp_path / f"{s.name}.env.json" for s in specs}
    specs = [dataclasses.replace(s, argv=[sys.executable, "-c", DUMP, str(dumps[s.name])]) for s in specs]

    launcher = LocalLauncher(LocalLauncher.Config(stop_timeout=5, startup_timeout=60), tmp_path)
    assert launcher.launch(specs) == 0

    seen = {name: json.loads(path.read_text()) for name, path in dumps.items()}
    assert set(seen) == {"inference", "orchestrator", "trainer"}
    for name, env in seen.items():
        assert env["WHO"] == name, name  # the component's own value wins over the run's
        assert env["SHARED"] == "run" and env["PRL_RUN_NAME"] == "env-test"
    assert seen["trainer"]["key1"] == "value1" and "key1" not in seen["orchestrator"]
    assert seen["inference"]["INFER_ONLY"] == "1" and "INFER_ONLY" not in seen["trainer"]
    assert seen["orchestrator"]["OMP_NUM_THREADS"] == "3"  # a TOML number becomes text
