"""SFT data: load rows, render them to tokens with loss masks, pack them into rows.

A row is either ``messages`` (a list of chat messages; wins when both forms are present)
or ``prompt`` + ``completion`` (each a string or a list of messages; the prompt is never
trained on). Tokens come only from the renderer, which attributes every token to a
message; a token is trained on when its message is trainable: by default its role's
``data.loss_mask`` entry, overridden per message by an optional ``message_loss_mask``
column (one bool per message). Template tokens between messages are never trained on.

Each sample of n tokens gives n-1 (input, target) pairs; the loss mask is the target
token's. Samples are cut to ``seq_len`` inputs and packed greedily into rows of
``seq_len * micro_batch_size`` tokens; a sample that does not fit starts the next row and
the rest of the row is padding (masked out, its own position run; the trainer cuts it off
before the forward pass). ``position_ids`` restart at 0 for every sample, which is how the
model keeps documents apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from prl.config.errors import DataError

MESSAGE_COLUMNS = ("messages", "prompt", "completion", "tools", "message_loss_mask")
SUBSET_COLUMN = "_prl_subset"


@dataclass
class Sample:
    """One tokenised document: inputs, next-token targets and the targets' loss mask."""

    inputs: list[int]
    targets: list[int]
    mask: list[bool]
    subset: int = 0


@dataclass
class PackedRow:
    """One packed row of ``length`` tokens."""

    input_ids: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor
    position_ids: torch.Tensor
    num_samples: int
    num_tokens: int
    subsets: tuple[int, ...]
    """Per sample: which interleaved subset it came from."""
    lengths: tuple[int, ...]
    """Per sample: its tokens in this row (the documents the model sees)."""


def load_dataset_rows(data_cfg: Any):
    """A ``datasets.Dataset`` from a local jsonl/json/parquet/csv file, a saved dataset
    directory or a hub name; several subsets/splits are interleaved."""
    import datasets

    path = Path(data_cfg.name)
    subsets = data_cfg.subsets or [None]
    splits = data_cfg.splits or ["train"]
    n = max(len(subsets), len(splits))
    parts = [_load_one(datasets, path, data_cfg, subsets[i % len(subsets)], splits[i % len(splits)]) for i in range(n)]
    if len(parts) == 1:
        return parts[0]
    # Tag each row with its part so progress/<subset>/ratio_* can count the mixture.
    parts = [part.add_column(SUBSET_COLUMN, [i] * len(part)) for i, part in enumerate(parts)]
    return datasets.interleave_datasets(
        parts, probabilities=data_cfg.probabilities, seed=data_cfg.seed, stopping_strategy=data_cfg.stopping_strategy
    )


def subset_labels(data_cfg: Any) -> list[str]:
    """Metric names of the interleaved parts: the subset, else the split, else both (and
    the part's index when even that repeats)."""
    subsets, splits = data_cfg.subsets or [], data_cfg.splits or []
    n = max(len(subsets), len(splits))
    if n < 2:
        return []
    for names in (subsets, splits):
        if len(set(names)) == n:
            return list(names)
    sub, spl = subsets or ["default"], splits or ["train"]
    labels = [f"{sub[i % len(sub)]}-{spl[i % len(spl)]}" for i in range(n)]
    return labels if len(set(labels)) == n else [f"{label}-{i}" for i, label in enumerate(labels)]


def _load_one(datasets, path: Path, cfg: Any, subset: str | None, split: str):
    kinds = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
    if path.is_file():
        if path.suffix not in kinds:
            raise DataError(f"data.name: unsupported file type '{path.suffix}' (use jsonl, json, parquet or csv)")
        return datasets.load_dataset(kinds[path.suffix], data_files=str(path), split="train")
    if path.is_dir() and ((path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists()):
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise DataError(f"data.splits: split '{split}' not in {path} (has {', '.join(ds)})")
            ds = ds[split]
        return ds
    return datasets.load_dataset(str(_hub_snapshot(cfg)), subset, split=split)


def _hub_snapshot(cfg: Any) -> Path:
    """The hub dataset's snapshot that the launching command fetched (prl.hub), loaded as
    a local directory: the same files in every rank and no request to the hub. Fetched
    here when the trainer was started by hand on a name not yet cached."""
    from prl import hub

    need = hub.Need("data.name", "dataset", cfg.name, cfg.revision)
    return hub.local_dir(cfg.name, "dataset", cfg.revision) or hub.fetch([need])[need]


class RowRenderer:
    """Turns dataset rows into :class:`Sample` through the configured renderer."""

    def __init__(self, data_cfg: Any, renderer_cfg: Any, tokenizer: str) -> None:
        self.cfg = data_cfg
        self.renderer_cfg = renderer_cfg
        self.tokenizer = tokenizer
        self._renderers: dict[tuple, Any] = {}
        cols = dict(data_cfg.columns)
        self.renderer_columns: dict[str, str] = dict(cols.pop("renderer", {"reasoning_effort": "reasoning_effort"}))
        unknown = sorted(set(cols) - set(MESSAGE_COLUMNS))
        if unknown:
            known = ", ".join(MESSAGE_COLUMNS)
            raise DataError(f"data.columns: unknown key(s) {', '.join(unknown)} (known: {known}, renderer)")
        self.col = {k: cols.get(k, k) for k in MESSAGE_COLUMNS}

    def renderer_for(self, row: dict) -> Any:
        fields = type(self.renderer_cfg).model_fields
        overrides = tuple(
            sorted((f, row[c]) for f, c in self.renderer_columns.items() if f in fields and row.get(c) is not None)
        )
        if overrides not in self._renderers:
            cfg = self.renderer_cfg.model_copy(update=dict(overrides)) if overrides else self.renderer_cfg
            self._renderers[overrides] = cfg.build(tokenizer=self.tokenizer)
        return self._renderers[overrides]

    def messages(self, row: dict, index: int) -> tuple[list[dict], list[bool]]:
        """The conversation and, per message, whether it is trained on."""
        col = self.col
        roles = self.cfg.loss_mask
        if row.get(col["messages"]) is not None:
            msgs = _as_messages(row[col["messages"]], None, index, col["messages"])
            train = [bool(roles.get(m["role"], False)) for m in msgs]
            prompt_len = 0
        elif row.get(col["prompt"]) is not None and row.get(col["completion"]) is not None:
            prompt = _as_messages(row[col["prompt"]], "user", index, col["prompt"])
            completion = _as_messages(row[col["completion"]], "assistant", index, col["completion"])
            msgs = prompt + completion
            train = [False] * len(prompt) + [bool(roles.get(m["role"], False)) for m in completion]
            prompt_len = len(prompt)
        else:
            raise DataError(
                f"row {index}: needs column '{col['messages']}' or both '{col['prompt']}' and '{col['completion']}'"
            )
        flags = row.get(col["message_loss_mask"])
        if flags is not None:
            if not isinstance(flags, list) or len(flags) != len(msgs) or not all(isinstance(f, bool) for f in flags):
                raise DataError(
                    f"row {index}: column '{col['message_loss_mask']}' must be a list of {len(msgs)} booleans "
                    "(one per message)"
                )
            train = [flag and i >= prompt_len for i, flag in enumerate(flags)]
        return msgs, train

    def tools(self, row: dict, index: int) -> list[dict] | None:
        name = self.col["tools"]
        value = row.get(name)
        if value is None or value == "":
            return None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as err:
                raise DataError(f"row {index}: column '{name}' is not valid JSON ({err.msg})") from None
        if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
            raise DataError(f"row {index}: column '{name}' must be a list of tool schemas")
        return value or None

    def sample(self, row: dict, index: int, seq_len: int) -> Sample | None:
        """The row as a sample cut to ``seq_len`` inputs; None when nothing is trainable."""
        msgs, train = self.messages(row, index)
        rendered = self.renderer_for(row).render(msgs, tools=self.tools(row, index))
        ids = rendered.token_ids[: seq_len + 1]
        mask = [mi >= 0 and train[mi] for mi in rendered.message_index[: seq_len + 1]]
        sampled = getattr(rendered, "sampled_mask", None)
        if sampled is not None:
            # A renderer that marks the tokens a model generates lets assistant turns train
            # on exactly those (not on the role header the template writes).
            mask = [
                m and (sampled[i] or msgs[mi]["role"] != "assistant")
                for i, (m, mi) in enumerate(zip(mask, rendered.message_index, strict=False))
            ]
        if len(ids) < 2 or not any(mask[1:]):
            return None
        return Sample(ids[:-1], ids[1:], mask[1:], int(row.get(SUBSET_COLUMN) or 0))


def _as_messages(value: Any, default_role: str | None, index: int, column: str) -> list[dict]:
    if isinstance(value, str) and default_role is not None:
        return [{"role": default_role, "content": value}]
    if not isinstance(value, list):
        got = type(value).__name__
        raise DataError(f"row {index}: column '{column}' must be a list of messages or a string, got {got}")
    out = []
    for j, msg in enumerate(value):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise DataError(f"row {index}: column '{column}' message {j} must be a dict with a 'role'")
        # Arrow fills keys other rows have with None; renderers expect them absent.
        out.append({k: v for k, v in msg.items() if v is not None})
    return out


def pack(samples: Iterator[Sample], length: int, pad_id: int = 0) -> Iterator[PackedRow]:
    """Greedy packing into rows of ``length`` tokens (each sample is at most ``length``)."""
    buf: list[Sample] = []
    used = 0
    for s in samples:
        if used + len(s.inputs) > length and buf:
            yield _row(buf, length, pad_id)
            buf, used = [], 0
        buf.append(s)
        used += len(s.inputs)
    if buf:
        yield _row(buf, length, pad_id)


def _row(buf: list[Sample], length: int, pad_id: int) -> PackedRow:
    ids, tgt, mask, pos = [], [], [], []
    for s in buf:
        ids += s.inputs
        tgt += s.targets
        mask += s.mask
        pos += range(len(s.inputs))
    real = len(ids)
    pad = length - real
    ids += [pad_id] * pad
    tgt += [pad_id] * pad
    mask += [False] * pad
    pos += range(pad)
    return PackedRow(
        torch.tensor(ids),
        torch.tensor(tgt),
        torch.tensor(mask),
        torch.tensor(pos),
        len(buf),
        real,
        tuple(s.subset for s in buf),
        tuple(len(s.inputs) for s in buf),
    )
