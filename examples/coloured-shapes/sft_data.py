"""SFT data with images from the coloured-shapes taskset: ``python sft_data.py OUT_DIR``.

Writes ``OUT_DIR/train.jsonl`` and ``OUT_DIR/val.jsonl`` from the taskset's ``train`` and
``eval`` splits with ``question = "colour"`` and one shape per image: each row is
``{"prompt": [system, user with an image_url part and the question], "completion": colour}``,
the image a base64 PNG ``data:`` URL. The colour is visible only in the image, so the
validation loss can only fall below guessing (ln 5 per answer token) by looking at it.
"""

import json
import sys
from pathlib import Path

from prl_tasks_builtin.coloured_shapes import ColouredShapes


def main(out: Path, num_train: int = 2000, num_eval: int = 100) -> None:
    cfg = ColouredShapes.Config(question="colour", min_shapes=1, max_shapes=1, num_train=num_train, num_eval=num_eval)
    taskset = ColouredShapes(cfg)
    out.mkdir(parents=True, exist_ok=True)
    for split, name in (("train", "train.jsonl"), ("eval", "val.jsonl")):
        rows = [{"prompt": t.prompt, "completion": t.data["answer"]} for t in taskset.tasks(split)]
        tmp = out / f".{name}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(out / name)  # atomic: a rerun never sees a half-written file
        print(f"{out / name}: {len(rows)} rows")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "data/coloured-shapes"))
