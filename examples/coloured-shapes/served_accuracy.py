"""Does the served model look? ``python served_accuracy.py BASE_URL [VAL_JSONL]``

The same check as ``accuracy.py``, through an inference server (``prl inference`` with the
exported model, torch backend or vLLM): every validation row's prompt goes to
``/v1/chat/completions`` as it is, image part and all, greedy, and the reply is right when
its answer (after the empty thinking block the chat template opens it with) starts with
the row's colour. Then again with the next row's image swapped in. A server
that dropped the images would score about 0.2 on both.
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from sft_data import swapped


def right(client: httpx.Client, row: dict) -> bool:
    body = {"messages": row["prompt"], "temperature": 0, "max_tokens": 16}
    res = client.post("/v1/chat/completions", json=body)
    if res.status_code != 200:
        raise SystemExit(f"{res.status_code}: {res.json()['error']['message']}")
    reply = res.json()["choices"][0]["message"]["content"] or ""
    # the chat template opens the answer with an empty thinking block, as in training
    return reply.split("</think>")[-1].strip().lower().startswith(row["completion"])


def main(base_url: str, val: Path) -> None:
    data = [json.loads(line) for line in val.read_text().splitlines()]
    others, same = swapped(data)
    # requests in flight together: the server batches them
    with httpx.Client(base_url=base_url, timeout=300) as client, ThreadPoolExecutor(16) as pool:
        own = sum(pool.map(lambda r: right(client, r), data)) / len(data)
        other = sum(pool.map(lambda r: right(client, r), others)) / len(data)
    print(
        f"{base_url}: {len(data)} rows; reply right with its own image {own:.2f}, "
        f"with the next row's image {other:.2f} (that image shows the same colour in {same:.2f})"
    )


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2] if len(sys.argv) > 2 else "data/coloured-shapes/val.jsonl"))
