"""Does the model look? ``python accuracy.py MODEL_DIR [VAL_JSONL]``

For every validation row, the exported model's most likely first token of the answer is
compared with the answer's, twice: with the row's own image, and with the next row's image
in its place. A model that reads the colour from the image scores near 1.0 on the first and,
on the second, about the share of rows whose swapped-in image has the same colour (printed
beside it); a model that guesses scores about 0.2 on both.
"""

import json
import sys
from pathlib import Path

import torch
from prl_trainer_torch.vision_rows import VisionRowRenderer
from sft_data import swapped
from transformers import AutoModelForImageTextToText, AutoTokenizer

from prl.config.policy import VLMConfig
from prl.config.roots import SFTDataConfig
from prl.plugins import get_registry


def first_token_right(model, rows: VisionRowRenderer, tok, row: dict) -> bool:
    s = rows.sample(row, 0, 1 << 12)
    answer = tok(row["completion"])["input_ids"]
    at = next(i for i in range(len(s.targets)) if s.targets[i : i + len(answer)] == answer)
    ids = torch.tensor([s.inputs[: at + 1]])
    with torch.no_grad():
        logits = model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            mm_token_type_ids=(ids == rows.image_token_id).int(),  # image tokens get 3-D rotary positions
            pixel_values=s.pixels.pixel_values,
            image_grid_thw=s.pixels.image_grid_thw,
        ).logits
    return int(logits[0, -1].argmax()) == s.targets[at]


def main(model_dir: str, val: Path) -> None:
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    renderer = get_registry().get("renderers", "auto").Config()
    rows = VisionRowRenderer(SFTDataConfig(name=str(val)), renderer, model_dir, VLMConfig())
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = [json.loads(line) for line in val.read_text().splitlines()]
    others, same = swapped(data)
    own = sum(first_token_right(model, rows, tok, r) for r in data) / len(data)
    other = sum(first_token_right(model, rows, tok, r) for r in others) / len(data)
    print(
        f"{model_dir}: {len(data)} rows; answer right with its own image {own:.2f}, "
        f"with the next row's image {other:.2f} (that image shows the same colour in {same:.2f})"
    )


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2] if len(sys.argv) > 2 else "data/coloured-shapes/val.jsonl"))
