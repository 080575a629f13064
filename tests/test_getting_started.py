"""docs/getting-started.md can be pasted: every ```bash block runs, in order, in a fresh
working directory, and every path the page names is one those commands really wrote.

The runs are shortened by flags appended to the page's own commands (COMMANDS below: each
command of the page, exactly as written, with its extra flags). A command the table does not
list fails the test, so the page and this test change together. Step numbers the page names
for the examples' final checkpoints (``step_600``) are rewritten to the shortened run's
(``step_2``) only when they are the config's ``max_steps``: a page naming any other step
exports a checkpoint that does not exist and fails.

The same run checks that checkpointing and exporting print no torch DCP warning about a
missing process group (the single-process trainer never starts one; prl silences exactly
that warning).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from prl.serving import free_port

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "getting-started.md"
EXAMPLE = ROOT / "examples" / "reverse-text"
SHORT_STEPS = 2
PORT = "8011"  # the page's inference port, replaced by a free one
SFT_SHORT = f"--max-steps {SHORT_STEPS} --ckpt.interval {SHORT_STEPS} --no-val --data.batch-size 2"
RL_SHORT = f"--max-steps {SHORT_STEPS} --orchestrator.batch-size 8 --inference.server.port {{port}}"
EVAL_SHORT = "--num-examples 2 --group-size 2 --client.base-url http://127.0.0.1:{port}"  # the file says 8011
SKIP = None

# Each command of the page -> the flags appended to it here (SKIP: not run here).
COMMANDS: dict[str, str | None] = {
    "make demo": SKIP,  # the whole demo (about 14 minutes); the README's quickstart
    "make test": SKIP,  # the whole suite, which holds this test
    "source .venv/bin/activate": SKIP,  # here the venv's bin/ is first on PATH instead
    # "Run it on a GPU": hub downloads and a GPU (benchmarks/hub_gpu.sh runs them on one;
    # tests/test_config_examples.py dry-runs both configs, tests/test_hub_e2e.py the hub path)
    "prl sft @ examples/reverse-text/gpu/sft.toml --dry-run": SKIP,
    "prl sft @ examples/reverse-text/gpu/sft.toml": SKIP,
    "prl export outputs/reverse-text-gpu-sft/checkpoints/step_100": SKIP,
    "prl rl @ examples/reverse-text/gpu/rl.toml"
    " --model.name outputs/reverse-text-gpu-sft/checkpoints/step_100/weights": SKIP,
    "prl --help": "",
    "prl plugins": "",
    "prl model init --preset tiny --out models/tiny": "",
    "python examples/reverse-text/task_sft_data.py data/reverse-text-task": "",
    "prl sft @ examples/reverse-text/sft.toml": SFT_SHORT,
    "prl export outputs/reverse-text-sft/checkpoints/step_600 models/tiny-sft --dtype float32": "",
    "prl inference --model.name models/tiny-sft --server.port 8011": "",
    "prl inference --model.name models/tiny-rl --server.port 8011": "",
    "until curl -sf http://127.0.0.1:8011/health >/dev/null; do sleep 1; done": "",
    "prl eval @ examples/reverse-text/rl-eval.toml --model.name models/tiny-sft --run.name eval-sft": EVAL_SHORT,
    "prl eval @ examples/reverse-text/rl-eval.toml --model.name models/tiny-rl --run.name eval-rl": EVAL_SHORT,
    "prl eval reverse-text -m models/tiny-sft -n 20 -r 4 -c 8 --client.base-url http://127.0.0.1:8011": "-n 1 -r 1",
    "kill %1": "",
    "python examples/reverse-text/heldout.py outputs/eval-sft": "",
    "python examples/reverse-text/heldout.py outputs/eval-sft outputs/eval-rl": "",
    "prl rl @ examples/reverse-text/rl.toml --dry-run": "",
    "ls outputs/reverse-text-rl/configs/latest/resolved/": "",
    "prl rl @ examples/reverse-text/rl.toml": RL_SHORT,
    "prl export outputs/reverse-text-rl/checkpoints/step_120 models/tiny-rl --dtype float32": "",
}
DCP_WARNING = "torch.distributed is disabled, unavailable or uninitialized"


def _final_steps() -> dict[str, str]:
    """``outputs/<run>/checkpoints/step_<max_steps>`` of each example -> the shortened run's."""
    out = {}
    for name in ("sft.toml", "rl.toml"):
        cfg = tomllib.loads((EXAMPLE / name).read_text())
        run = f"outputs/{cfg['run']['name']}/checkpoints/step_"
        out[f"{run}{cfg['max_steps']}"] = f"{run}{SHORT_STEPS}"
    return out


def bash_blocks(text: str) -> list[list[tuple[str, str | None]]]:
    """Each ```bash block as (command, expected output) pairs: continued lines joined, a
    trailing comment dropped; a comment line right after a command is its expected output."""
    blocks = []
    for body in re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S):
        commands: list[tuple[str, str | None]] = []
        for line in body.replace("\\\n", " ").splitlines():
            if line.startswith("#") and commands:
                commands[-1] = (commands[-1][0], line.lstrip("# ").strip())
            elif line.strip():
                commands.append((re.sub(r"\s+", " ", re.sub(r"\s+#.*$", "", line)).strip(), None))
        blocks.append(commands)
    return blocks


def _script(commands: list[tuple[str, str | None]], port: int) -> str:
    lines = ["trap 'code=$?; kill $(jobs -p) 2>/dev/null || true; exit $code' EXIT"]  # no server left
    for command, _ in commands:
        background = command.endswith("&")
        command = command.rstrip("&").strip()
        assert command in COMMANDS, f"docs/getting-started.md runs {command!r}: add it to COMMANDS in {__file__}"
        flags = COMMANDS[command]
        if flags is SKIP:
            continue
        for full, short in _final_steps().items():
            command = re.sub(rf"{re.escape(full)}\b", short, command)
        line = f"{command} {flags}".strip().replace("{port}", str(port)).replace(PORT, str(port))
        lines.append(line + (" &" if background else ""))
    return "\n".join([*lines, "wait"]) + "\n"


def _run(script: str, cwd: Path, env: dict[str, str], log: Path) -> str:
    with log.open("w") as out:
        proc = subprocess.Popen(["bash", "-e"], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, text=True, start_new_session=True)  # fmt: skip
        try:
            proc.communicate(script, timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = log.read_text()
    assert proc.returncode == 0, f"this block failed (exit {proc.returncode}):\n{script}\n" + output[-3000:]
    return output


@pytest.mark.slow
def test_every_bash_block_of_getting_started_runs_in_order(tmp_path):
    text = PAGE.read_text()
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRL_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    port = free_port("127.0.0.1")
    printed = []
    for number, commands in enumerate(bash_blocks(text), 1):
        printed.append(_run(_script(commands, port), work, env, tmp_path / f"block{number}.log"))
        for command, expected in commands:
            if command.startswith("ls ") and expected is not None:
                listed = sorted(p.name for p in (work / command.split()[1]).iterdir())
                assert listed == sorted(expected.split()), f"{command} lists {listed}, the page says {expected}"
    named = set(re.findall(r"`((?:outputs|models|data)/[^`<>\s]*)`", text))
    missing = [path for path in sorted(named) if not (work / path).exists()]
    assert not missing, f"docs/getting-started.md names paths the commands did not write: {missing}"
    logs = [p.read_text() for p in work.glob("outputs/*/logs/latest/*.log")]
    assert not [o for o in printed + logs if DCP_WARNING in o], "a checkpoint save or load printed DCP's warning"
