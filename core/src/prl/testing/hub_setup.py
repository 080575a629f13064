"""Point the Hugging Face clients at a :class:`~prl.testing.hub.LocalHub`, and make tiny
repo contents to serve from it.

:func:`use_local_hub` is what the ``local_hub`` fixture does: environment variables for
subprocesses, plus the module attributes ``huggingface_hub`` and ``datasets`` copied from the
environment when they were imported, for this process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Variables that would send the clients elsewhere (offline mode, a real token, other caches).
_CLEARED = (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_OIDC_RESOURCE",
    "HF_ASSETS_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HUGGINGFACE_ASSETS_CACHE",
    "HF_XET_CACHE",
    "HF_MODULES_CACHE",
    "TRANSFORMERS_CACHE",
)


def hub_environment(url: str, home: Path) -> dict[str, str]:
    """The variables that send every client (in any process) to ``url``, with caches in ``home``."""
    return {
        "HF_ENDPOINT": url,
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_DATASETS_CACHE": str(home / "datasets"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        # datasets would count each load with a request to a real AWS URL
        "HF_UPDATE_DOWNLOAD_COUNTS": "0",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }


def use_local_hub(hub: Any, monkeypatch: Any, home: Path) -> None:
    """Send the Hugging Face clients of this process and of its future subprocesses to ``hub``,
    with empty caches under ``home``; ``monkeypatch`` undoes all of it."""
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name, value in hub_environment(hub.url, home).items():
        monkeypatch.setenv(name, value)
    _patch_huggingface_hub(monkeypatch, hub.url, home)
    _patch_datasets(monkeypatch, hub.url, home)


def _set(monkeypatch: Any, module: Any, values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        if hasattr(module, name):  # a name another version lacks is not ours to add
            monkeypatch.setattr(module, name, value)


def _patch_huggingface_hub(monkeypatch: Any, url: str, home: Path) -> None:
    """``huggingface_hub.constants`` reads the environment at import; its other modules read
    the constants when called, except the cache manager's copy of the cache path and the set
    of hub origins the client forwards a token to on a redirect."""
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is None:
        return  # imported later, it reads the environment set above
    _set(
        monkeypatch,
        constants,
        {
            "ENDPOINT": url,
            "HUGGINGFACE_CO_URL_TEMPLATE": url + "/{repo_id}/resolve/{revision}/{filename}",
            "HF_HOME": str(home),
            "HF_HUB_CACHE": str(home / "hub"),
            "HUGGINGFACE_HUB_CACHE": str(home / "hub"),
            "HF_ASSETS_CACHE": str(home / "assets"),
            "HF_XET_CACHE": str(home / "xet"),
            "HF_TOKEN_PATH": str(home / "token"),
            "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
            "HF_HUB_OFFLINE": False,
            "HF_HUB_DISABLE_TELEMETRY": True,
            "HF_HUB_DISABLE_XET": True,
            "HF_HUB_DISABLE_PROGRESS_BARS": True,
        },
    )
    # The module-level HfApi behind huggingface_hub.model_info & co, and the module-level
    # HfFileSystem, took the endpoint when they were made.
    if (hf_api := sys.modules.get("huggingface_hub.hf_api")) is not None:
        monkeypatch.setattr(hf_api.api, "endpoint", url)
    if (hf_file_system := sys.modules.get("huggingface_hub.hf_file_system")) is not None:
        monkeypatch.setattr(hf_file_system.hffs, "endpoint", url)
        monkeypatch.setattr(hf_file_system.hffs._api, "endpoint", url)
    if (cache_manager := sys.modules.get("huggingface_hub.utils._cache_manager")) is not None:
        _set(monkeypatch, cache_manager, {"HF_HUB_CACHE": str(home / "hub")})
    http = sys.modules.get("huggingface_hub.utils._http")
    if http is not None and hasattr(http, "_HUB_ORIGINS") and hasattr(http, "_url_origin"):
        monkeypatch.setattr(http, "_HUB_ORIGINS", frozenset({*http._HUB_ORIGINS, http._url_origin(url)}))


def _patch_datasets(monkeypatch: Any, url: str, home: Path) -> None:
    config = sys.modules.get("datasets.config")
    if config is None:
        return
    datasets_cache = home / "datasets"
    _set(
        monkeypatch,
        config,
        {
            "HF_ENDPOINT": url,
            "HUB_DATASETS_URL": url + "/datasets/{repo_id}/resolve/{revision}/{path}",
            "HF_CACHE_HOME": str(home),
            "HF_DATASETS_CACHE": datasets_cache,
            "DOWNLOADED_DATASETS_PATH": datasets_cache / "downloads",
            "EXTRACTED_DATASETS_PATH": datasets_cache / "downloads" / "extracted",
            "HF_HUB_OFFLINE": False,
            "HF_DATASETS_OFFLINE": False,
            "HF_UPDATE_DOWNLOAD_COUNTS": False,
        },
    )


def forget_filesystems() -> None:
    """Drop cached ``HfFileSystem`` instances and listings: fsspec keeps one instance per
    endpoint, with its listings, and a later hub may be given the same port."""
    module = sys.modules.get("huggingface_hub.hf_file_system")
    if module is not None:
        module.HfFileSystem.clear_instance_cache()
        module.hffs.invalidate_cache()


# -- repo contents ---------------------------------------------------------------------------


def reverse_rows(words: Sequence[str], messages: bool = False) -> list[dict[str, Any]]:
    """Reverse-text rows: ``prompt``/``completion`` message lists, or one ``messages`` list."""
    rows = []
    for word in words:
        prompt = [{"role": "user", "content": f"Reverse the text: {word}"}]
        completion = [{"role": "assistant", "content": word[::-1]}]
        rows.append({"messages": prompt + completion} if messages else {"prompt": prompt, "completion": completion})
    return rows


WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")

DEFAULT_SUBSETS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "default": {"train": reverse_rows(WORDS[:8]), "test": reverse_rows(WORDS[8:])},
    "messages": {"train": reverse_rows(WORDS[:4], messages=True)},
}


def tiny_dataset_dir(
    out: str | Path,
    subsets: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]] | None = None,
    *,
    file_format: str = "jsonl",
) -> Path:
    """A dataset repo laid out as the hub lays out datasets: one shard per subset and split
    (``default`` in ``data/``, others in a folder of their name, e.g.
    ``data/train-00000-of-00001.jsonl``) and a README.md whose ``configs:`` header names them,
    so ``load_dataset(repo, "<subset>", split=...)`` works. ``file_format`` "parquet" writes
    parquet shards (an LFS file on the hub; needs pyarrow)."""
    if file_format not in ("jsonl", "parquet"):
        raise ValueError(f"file_format must be 'jsonl' or 'parquet' (got {file_format!r})")
    root = Path(out)
    card = ["---", "configs:"]
    for name, splits in (subsets or DEFAULT_SUBSETS).items():
        folder = "data" if name == "default" else name
        card += [f"- config_name: {json.dumps(name)}", "  data_files:"]
        for split, rows in splits.items():
            shard = root / folder / f"{split}-00000-of-00001.{file_format}"
            shard.parent.mkdir(parents=True, exist_ok=True)
            _write_rows(shard, rows, file_format)
            card += [f"  - split: {json.dumps(split)}", f"    path: {json.dumps(f'{folder}/{split}-*')}"]
    card += ["---", "", "# A tiny dataset for tests", ""]
    (root / "README.md").write_text("\n".join(card))
    return root


def _write_rows(path: Path, rows: Sequence[Mapping[str, Any]], file_format: str) -> None:
    if file_format == "jsonl":
        path.write_text("".join(json.dumps(dict(row)) + "\n" for row in rows))
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([dict(row) for row in rows]), path)
