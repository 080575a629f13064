"""SFT data in the exact format of the RL task: ``python task_sft_data.py OUT_DIR``.

Writes ``OUT_DIR/train.jsonl`` and ``OUT_DIR/val.jsonl`` from the reverse-text taskset's
``train`` and ``eval`` splits (prl-tasks-builtin, default config: 1-3 words, its system
prompt). Each row is ``{"prompt": [system, user messages], "completion": reversed text}``,
so SFT warms up the model on the prompts RL later samples from, and ``val.jsonl`` is the
same held-out split ``rl-eval.toml`` scores.
"""

import json
import sys
from pathlib import Path

from prl_tasks_builtin.reverse_text import ReverseText


def main(out: Path) -> None:
    taskset = ReverseText(ReverseText.Config())
    out.mkdir(parents=True, exist_ok=True)
    for split, name in (("train", "train.jsonl"), ("eval", "val.jsonl")):
        rows = [{"prompt": t.prompt, "completion": t.data["answer"]} for t in taskset.tasks(split)]
        tmp = out / f".{name}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(out / name)  # atomic: a rerun never sees a half-written file
        print(f"{out / name}: {len(rows)} rows")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "data/reverse-text-task"))
