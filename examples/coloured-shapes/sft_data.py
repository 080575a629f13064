"""SFT rows with images: ``python sft_data.py OUT_DIR`` writes ``OUT_DIR/train.jsonl`` (2,000
rows) and ``OUT_DIR/val.jsonl`` (100 rows).

Each row asks for the colour of the one large shape (circle, square or triangle, in one of
the coloured-shapes taskset's five colours) in a generated 64x64 PNG, sent as a base64
``data:`` URL image part, and answers with the colour's name:

    {"prompt": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}},
                                             {"type": "text", "text": "What colour is the shape?"}]}],
     "completion": "red"}

The colour is only in the image, so a model can beat a one-in-five guess only by looking.
"""

import base64
import copy
import io
import json
import random
import sys
from pathlib import Path

from PIL import Image, ImageDraw
from prl_tasks_builtin.coloured_shapes import COLOURS, SHAPES


def image_url(shape: str, colour: str, rng: random.Random) -> str:
    img = Image.new("RGB", (64, 64), "white")
    x, y = rng.randint(4, 12), rng.randint(4, 12)  # a shape of 40-52 pixels, placed at random
    box, fill = (x, y, 64 - rng.randint(4, 12), 64 - rng.randint(4, 12)), COLOURS[colour]
    draw = ImageDraw.Draw(img)
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([(box[0], box[3]), ((box[0] + box[2]) // 2, box[1]), (box[2], box[3])], fill=fill)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def row(rng: random.Random) -> dict:
    shape, colour = rng.choice(SHAPES), rng.choice(list(COLOURS))
    content = [
        {"type": "image_url", "image_url": {"url": image_url(shape, colour, rng)}},
        {"type": "text", "text": "What colour is the shape?"},
    ]
    return {"prompt": [{"role": "user", "content": content}], "completion": colour}


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
    for name, n, seed in (("train.jsonl", 2000, 0), ("val.jsonl", 100, 1)):
        rng = random.Random(seed)
        tmp = out / f".{name}.tmp"
        tmp.write_text("".join(json.dumps(row(rng)) + "\n" for _ in range(n)))
        tmp.replace(out / name)  # atomic: a rerun never sees a half-written file
        print(f"{out / name}: {n} rows")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "data/coloured-shapes"))
