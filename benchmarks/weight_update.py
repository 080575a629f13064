"""Weight-update latency: trainer's optimizer step end -> inference serves the new version.

What is timed, per transport and version (the median of ``--repeats`` versions is printed):
the trainer's weights change in place on the GPU (standing in for ``optimizer.step()``),
then, exactly as in a run, the trainer publishes them through the weight transport
(filesystem: CPU copy + safetensors in ``broadcasts/step_N``; nccl: the broadcast group)
while the consumer side acknowledges the handshake and calls the real inference server's
pause -> ``/update_weights`` -> resume. The clock stops when the server has answered that
it serves the new version and the trainer's publish has returned.

The inference server is the embedded torch engine (``prl_inference_torch``) on a GPU,
serving the same shape; the model is a locally made Qwen3 of the chosen preset, bf16
(random weights; nothing is downloaded). Both transports are measured in the same run.
NCCL needs the trainer and the server on different GPUs (NCCL refuses two ranks of one
group on one device); with one GPU the nccl transport runs with gloo instead, staging
through host memory, and the output says so.

    python benchmarks/weight_update.py --preset qwen3-0.6b --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch


def make_model(out: Path, preset: str) -> Path:
    """A random bf16 model directory of ``preset`` with the byte-level tokenizer."""
    from prl_model_init.build import _save_tokenizer, model_config
    from transformers import Qwen3ForCausalLM

    if (out / "config.json").exists():
        return out
    config = model_config(preset)
    config.dtype = "bfloat16"
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    _save_tokenizer(out, preset)
    return out


def start_server(model_dir: Path, work: Path, device: int | None) -> tuple[subprocess.Popen, str]:
    ready = work / "ready"
    backend = {"type": "torch", "device": "cpu" if device is None else "cuda", "dtype": "bfloat16"}
    cfg = {"model": {"name": str(model_dir)}, "server": {"port": 0}, "backend": {**backend, "ready_file": str(ready)}}
    (work / "inference.json").write_text(json.dumps(cfg))
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": str(device)} if device is not None else {})}
    log = open(work / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "prl_inference_torch", str(work / "inference.json")],
                            stdout=log, stderr=subprocess.STDOUT, env=env)  # fmt: skip
    deadline = time.monotonic() + 600
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"inference server did not start:\n{(work / 'server.log').read_text()[-3000:]}")
        time.sleep(0.2)
    return proc, ready.read_text().strip()


def transport(kind: str, run_dir: Path, backend: str):
    if kind == "filesystem":
        from prl_weights_filesystem import FilesystemWeights

        return FilesystemWeights(FilesystemWeights.Config(timeout=600), run_dir)
    from prl_weights_nccl import NcclWeights

    from prl.serving import free_port

    cfg = NcclWeights.Config(timeout=600, backend=backend, port=free_port("127.0.0.1"), inference_world_size=1)
    return NcclWeights(cfg, run_dir)


def publish_state(model, weights) -> dict:
    """What the RL trainer hands the transport (one rank: device tensors for in-band ones)."""
    if weights.device_tensors:
        return model.state_dict()
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


async def measure(kind: str, backend: str, model, url: str, repeats: int, run_dir: Path) -> dict:
    from prl.client import InferenceHTTPClient
    from prl.orchestrator.weights import load_version

    weights = transport(kind, run_dir / kind, backend)
    probe = next(iter(model.parameters()))
    times, publish_s, load_s = [], [], []
    async with InferenceHTTPClient(url, timeout=600) as client:
        await weights.connect(client)
        for version in range(repeats + 1):  # version 0 warms up (nccl: forms the group)
            with torch.no_grad():
                probe.add_(1e-3)  # the optimizer step
            if probe.is_cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            done = {}

            def trainer(v=version, t0=t0, done=done) -> None:
                weights.publish(publish_state(model, weights), v)
                done["publish"] = time.perf_counter() - t0

            thread = threading.Thread(target=trainer)
            thread.start()
            weight_dir = await asyncio.to_thread(weights.receive, version, 600, True)
            t1 = time.perf_counter()
            await load_version(client, weight_dir, version)
            load = time.perf_counter() - t1
            await asyncio.to_thread(thread.join)
            total = time.perf_counter() - t0
            if version:
                times.append(total)
                publish_s.append(done["publish"])
                load_s.append(load)
            print(f"  {kind:<10} version {version}: {total:.3f} s (publish {done['publish']:.3f} s, "
                  f"server update {load:.3f} s)", flush=True)  # fmt: skip
    return {"median_s": statistics.median(times), "min_s": min(times), "publish_median_s": statistics.median(publish_s),
            "update_median_s": statistics.median(load_s)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="qwen3-0.6b")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    gpus = torch.cuda.device_count()  # 0: a CPU smoke run (--preset tiny), figures meaningless
    work = args.work or Path(tempfile.mkdtemp(prefix="prl-weights-"))
    model_dir = make_model(work / args.preset, args.preset)
    server_gpu = (1 if gpus > 1 else 0) if gpus else None
    proc, url = start_server(model_dir, work, server_gpu)
    try:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to("cuda:0" if gpus else "cpu")
        gib = sum(p.numel() * p.element_size() for p in model.state_dict().values()) / 2**30
        nccl_backend = "nccl" if gpus > 1 else "gloo"
        print(f"{args.preset}: {gib:.2f} GiB of bf16 weights; trainer on GPU 0, inference on GPU {server_gpu}; "
              f"{torch.cuda.get_device_name(0) if gpus else 'CPU'}", flush=True)  # fmt: skip
        results = {}
        for kind, backend in (("filesystem", ""), ("nccl", nccl_backend)):
            results[kind] = asyncio.run(measure(kind, backend, model, url, args.repeats, work / "run"))
            results[kind]["backend"] = backend or "files"
        fs, nc = results["filesystem"]["median_s"], results["nccl"]["median_s"]
        print(f"\n{args.preset} weight update (median of {args.repeats}): filesystem {fs:.3f} s, "
              f"nccl transport over {nccl_backend} {nc:.3f} s ({fs / nc:.2f}x faster than filesystem)")  # fmt: skip
        if args.out:
            args.out.write_text(json.dumps({"preset": args.preset, "gib": gib, "gpus": gpus, **results}, indent=2))
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
