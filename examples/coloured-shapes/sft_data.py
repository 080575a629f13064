"""SFT rows with images: ``python sft_data.py OUT_DIR`` writes ``OUT_DIR/train.jsonl`` (2,000
rows) and ``OUT_DIR/val.jsonl`` (100 rows).

The rows are the coloured-shapes taskset's own tasks with :data:`TASKSET`'s settings (one
large shape per 64x64 PNG, the question naming its kind, the answer its colour): its train
split for training, its eval split for validation, so ``prl eval`` and ``prl rl`` on the same
settings ask what SFT taught. Each row is the task's prompt (system message, then an
``image_url`` part with a base64 ``data:`` URL and the question) and the answer:

    {"prompt": [{"role": "system", "content": "Answer the question about the image. ..."},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}},
                                             {"type": "text", "text": "What colour is the circle?"}]}],
     "completion": "red"}

The colour is only in the image, so a model can beat a one-in-five guess only by looking.
"""

import copy
import json
import sys
from pathlib import Path

from prl_tasks_builtin import ColouredShapes

# The taskset settings these rows come from; rl.toml and eval.toml use the same.
TASKSET = {"question": "colour", "grid": 1, "min_shapes": 1, "max_shapes": 1}


def rows(split: str, n: int) -> list[dict]:
    config = ColouredShapes.Config(**TASKSET, num_train=n, num_eval=n)
    return [{"prompt": t.prompt, "completion": t.data["answer"]} for t in ColouredShapes(config).tasks(split)]


def swapped(data: list[dict]) -> tuple[list[dict], float]:
    """Each row with the next row's image in place of its own (what ``accuracy.py`` and
    ``served_accuracy.py`` ask second), and the share of rows whose swapped-in image shows
    the same colour: what a model that follows the image scores on them."""
    out = []
    for i, r in enumerate(data):
        other = copy.deepcopy(r)
        other["prompt"][-1]["content"][0] = data[(i + 1) % len(data)]["prompt"][-1]["content"][0]
        out.append(other)
    same = sum(data[i]["completion"] == data[(i + 1) % len(data)]["completion"] for i in range(len(data)))
    return out, same / len(data)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, split, n in (("train.jsonl", "train", 2000), ("val.jsonl", "eval", 100)):
        tmp = out / f".{name}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows(split, n)))
        tmp.replace(out / name)  # atomic: a rerun never sees a half-written file
        print(f"{out / name}: {n} rows")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "data/coloured-shapes"))
