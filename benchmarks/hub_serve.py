"""Serve models and datasets as a local Hugging Face Hub (prl.testing.hub), for machines
that cannot reach the real one: benchmarks/hub_gpu.sh runs the GPU reverse-text example
on it exactly as a user with the hub would.

    python benchmarks/hub_serve.py --url-file URL_FILE --log LOG.json \
        --model Qwen/Qwen3-0.6B=DIR --dataset PrimeIntellect/Reverse-Text-SFT=reverse-text:2000

``--dataset NAME=reverse-text:N`` makes a reverse-text SFT set of N rows (prompt and
completion message lists, the format of the real one); ``NAME=DIR`` serves a directory.
On SIGTERM it writes the files whose bodies were downloaded to ``--log`` and exits.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import string
import tempfile
import threading
from pathlib import Path

from prl.testing.hub import LocalHub
from prl.testing.hub_setup import reverse_rows, tiny_dataset_dir


def _reverse_text(rows: int) -> Path:
    rng = random.Random(0)
    words = [
        "".join(rng.choices(string.ascii_lowercase + " ", k=rng.randint(8, 40))).strip() or "x" for _ in range(rows)
    ]
    out = Path(tempfile.mkdtemp(prefix="reverse-text-"))
    return tiny_dataset_dir(out, {"default": {"train": reverse_rows(words)}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], help="NAME=DIR")
    parser.add_argument("--dataset", action="append", default=[], help="NAME=DIR or NAME=reverse-text:ROWS")
    parser.add_argument("--url-file", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    hub = LocalHub().start()
    for spec in args.model:
        name, directory = spec.split("=", 1)
        hub.add_model(name, directory)
    for spec in args.dataset:
        name, source = spec.split("=", 1)
        kind, _, rows = source.partition(":")
        hub.add_dataset(name, _reverse_text(int(rows)) if kind == "reverse-text" else source)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    Path(args.url_file).write_text(hub.url)
    stop.wait()
    Path(args.log).write_text(json.dumps({"file_downloads": hub.file_downloads(), "requests": len(hub.log)}))
    hub.down()


if __name__ == "__main__":
    main()
