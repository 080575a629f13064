"""coloured-shapes: answer a question about a generated image of coloured shapes (single turn).

Data: each example is a PNG of ``min_shapes``..``max_shapes`` shapes (circle, square,
triangle) in named colours on a white background, one shape per cell of a ``grid`` x ``grid``
layout (3x3 by default; ``grid = 1`` is one large shape) so
shapes never touch, drawn by Pillow without anti-aliasing (every pixel of a shape is
exactly its colour). Everything is drawn from ``random.Random`` seeded by the split's seed
(train ``2·seed``, eval ``2·seed + 1``) and the example index, so an example is the same
whatever else is generated.

The prompt is one user message whose content is a list of OpenAI chat content parts: an
``image_url`` part holding the PNG as a ``data:image/png;base64,...`` URL, then a text
part with the question. Questions (``question``):

* ``count``: "How many <colour> shapes are there?"; the answer is a whole number (0 too);
* ``colour``: "What colour is the <shape>?"; that shape occurs exactly once;
* ``mixed``: either, picked per example.

Reward: 1.0 when the parsed answer equals the truth, else 0.0. The answer is the
completion after any ``<think>`` block, inside ``<answer>`` when present; a count is its
last integer and a colour its last colour name, so "There are 2." and "It is red." score.
Metrics: ``answered`` (1.0 when an answer of the asked kind was found).
"""

from __future__ import annotations

import base64
import io
import random
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.contracts.taskset import Task, Taskset, TasksetConfig
from prl.tasks import Conversation, episode_trace, extract_answer, last_int, strip_think, with_default_max_tokens
from prl.types import Sampling, Trace

# Far apart in RGB, so a test (or a model) can tell them by exact pixel value.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (40, 70, 220),
    "yellow": (235, 200, 20),
    "purple": (140, 50, 170),
}
SHAPES = ("circle", "square", "triangle")
BACKGROUND = (255, 255, 255)
GRID = 3  # cells per side by default; at most GRID² shapes
MIN_SIZE, MAX_SIZE = 32, 512  # below 32 px a 3x3 cell is too small to tell shapes apart
SYSTEM = "Answer the question about the image. Reply with the answer only."
_COLOUR_WORD = re.compile(r"\b(" + "|".join(COLOURS) + r")\b", re.IGNORECASE)


def make_example(
    seed: int, index: int, size: int, min_shapes: int, max_shapes: int, question: str, grid: int = GRID
) -> dict[str, Any]:
    """The shapes, question and answer of example ``index`` (a pure function of its arguments)."""
    rng = random.Random(f"coloured-shapes/{seed}/{index}")  # str seeds hash stably (sha512)
    kind = rng.choice(("count", "colour")) if question == "mixed" else question
    n = rng.randint(min_shapes, max_shapes)
    cells = rng.sample(range(grid * grid), n)
    if kind == "colour":
        # The asked-about shape is drawn once; the others are of the other two kinds.
        target = rng.choice(SHAPES)
        kinds = [target] + [rng.choice([s for s in SHAPES if s != target]) for _ in range(n - 1)]
    else:
        kinds = [rng.choice(SHAPES) for _ in range(n)]
    shapes = [{"shape": k, "colour": rng.choice(list(COLOURS)), "cell": c} for k, c in zip(kinds, cells, strict=True)]
    if kind == "colour":
        text, answer = f"What colour is the {target}?", shapes[0]["colour"]
    else:
        colour = rng.choice(list(COLOURS))
        text = f"How many {colour} shapes are there?"
        answer = str(sum(s["colour"] == colour for s in shapes))
    return {"kind": kind, "shapes": shapes, "question": text, "answer": answer, "size": size, "grid": grid}


def shape_box(cell: int, size: int, grid: int = GRID) -> tuple[int, int, int, int]:
    """The bounding box of a shape in ``cell``: its grid cell less a margin, so shapes never touch."""
    step = size / grid
    row, col = divmod(cell, grid)
    margin = max(2, round(step * 0.15))
    x0, y0 = round(col * step) + margin, round(row * step) + margin
    return x0, y0, round((col + 1) * step) - margin - 1, round((row + 1) * step) - margin - 1


def draw_png(shapes: list[dict[str, Any]], size: int, grid: int = GRID) -> bytes:
    """The PNG bytes of ``shapes`` on a white ``size`` x ``size`` image."""
    from PIL import Image, ImageDraw  # the plugin imports without Pillow; drawing needs it

    img = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(img)
    for s in shapes:
        x0, y0, x1, y1 = shape_box(s["cell"], size, grid)
        fill = COLOURS[s["colour"]]
        if s["shape"] == "circle":
            draw.ellipse((x0, y0, x1, y1), fill=fill)
        elif s["shape"] == "square":
            draw.rectangle((x0, y0, x1, y1), fill=fill)
        else:
            draw.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], fill=fill)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def parse_reply(reply: str, kind: str) -> str | None:
    """The answer of ``kind`` in a reply: its last integer, or its last colour name; None if none."""
    text = extract_answer(strip_think(reply))
    if kind == "count":
        n = last_int(text)
        return None if n is None else str(n)
    found = _COLOUR_WORD.findall(text)
    return found[-1].lower() if found else None


class ColouredShapes(Taskset):
    """Count or name the coloured shapes in a generated image; reward 1 for the exact answer."""

    id = "coloured-shapes"
    in_process = True
    splits = ("train", "eval", "test")
    sends_images = True

    class Config(TasksetConfig):
        """coloured-shapes taskset."""

        id: Literal["coloured-shapes"] = "coloured-shapes"
        """Taskset id."""
        num_train: Annotated[int, Field(ge=1)] = 10000
        """Examples in the train split."""
        num_eval: Annotated[int, Field(ge=1)] = 200
        """Examples in the eval split."""
        image_size: Annotated[int, Field(ge=MIN_SIZE, le=MAX_SIZE)] = 64
        """Width and height of each image in pixels (32..512)."""
        min_shapes: Annotated[int, Field(ge=1, le=GRID * GRID)] = 1
        """Fewest shapes per image."""
        max_shapes: Annotated[int, Field(ge=1, le=GRID * GRID)] = 4
        """Most shapes per image (at most grid²: one per cell)."""
        grid: Annotated[int, Field(ge=1, le=GRID)] = GRID
        """Cells per side of the layout grid (1..3): 1 draws one large shape filling the image."""
        question: Literal["count", "colour", "mixed"] = "count"
        """'count' (how many <colour> shapes), 'colour' (what colour is the <shape>), or 'mixed'."""
        seed: int = 0
        """Data seed (train uses 2·seed, eval 2·seed+1)."""
        max_tokens: Annotated[int, Field(ge=1)] = 32
        """Completion bound used when the run's sampling leaves max_tokens unset."""
        system_prompt: str | None = SYSTEM
        """System message; None sends only the user message."""

        @model_validator(mode="after")
        def _shape_range(self) -> ColouredShapes.Config:
            if self.min_shapes > self.max_shapes:
                raise ValueError(f"min_shapes ({self.min_shapes}) must not exceed max_shapes ({self.max_shapes})")
            if self.max_shapes > self.grid * self.grid:
                raise ValueError(f"max_shapes ({self.max_shapes}) must not exceed grid² ({self.grid * self.grid})")
            return self

    def tasks(self, split: str = "train") -> Iterator[Task]:
        split = "eval" if split == "test" else split  # one held-out split, by either name
        c = self.config
        count = {"train": c.num_train, "eval": c.num_eval}.get(split)
        if count is None:
            raise ValueError(f"coloured-shapes has splits 'train' and 'eval' (or 'test'), not '{split}'")
        seed = 2 * c.seed + (split == "eval")
        for i in range(count):
            ex = make_example(seed, i, c.image_size, c.min_shapes, c.max_shapes, c.question, c.grid)
            content = [
                {"type": "image_url", "image_url": {"url": data_url(draw_png(ex["shapes"], c.image_size, c.grid))}},
                {"type": "text", "text": ex["question"]},
            ]
            prompt = ([{"role": "system", "content": c.system_prompt}] if c.system_prompt else []) + [
                {"role": "user", "content": content}
            ]
            yield Task(task_id=f"{split}/{i}", prompt=prompt, data=ex)

    async def rollout(self, task: Task, client: InferenceClient, renderer: Renderer, sampling: Sampling) -> Trace:
        conv = Conversation(renderer, task.prompt)
        reply = await conv.sample(client, with_default_max_tokens(sampling, self.config.max_tokens))
        answer = parse_reply(reply, task.data["kind"])
        return episode_trace(
            task,
            conv,
            reward=float(answer == task.data["answer"]),
            metrics={"answered": float(answer is not None)},
            env=self.id,
        )
