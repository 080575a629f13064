"""``prl export --num-workers N``: export a checkpoint too large for one process.

``prl export`` starts ``torchrun --nproc-per-node N -m prl_trainer_torch.export_dist <job>``
itself (as ``prl sft`` does). Each rank:

1. builds the model from its config on the meta device and shards it with FSDP2 over the
   N ranks, so no rank ever holds more than 1/N of the parameters plus one full tensor;
2. loads its shard of the DCP checkpoint (``dcp.load`` reads only what the rank owns);
3. walks the parameters in a fixed order, all-gathering each one (``full_tensor()``, a
   collective every rank joins); the rank that owns the name keeps it on the CPU in the
   export dtype. Names go to ranks greedily by size, so every rank keeps about 1/N;
4. writes its own ``model-0000r-of-0000N.safetensors`` under the names ``save_pretrained``
   uses. Once all files are written, rank 0 writes the ``model.safetensors.index.json`` that
   maps each name to its file (read from the files), the config and the tokenizer files, so
   ``from_pretrained`` loads the directory as any sharded model.

With ``--dtype fp8`` each rank quantizes the tensors it kept to blockwise FP8 before writing
(:mod:`prl_trainer_torch.fp8`), so no bf16 copy of the model is ever written; rank 0 then
indexes the files (weights and their ``weight_scale_inv``) and adds ``quantization_config``.

On GPUs the ranks use NCCL, on CPUs gloo. The result holds the same tensors as the
single-process export (:func:`prl_trainer_torch.export.export_checkpoint`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

# fp8: each rank gathers its tensors in bf16 and quantizes them itself (prl_trainer_torch.fp8).
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "fp8": torch.bfloat16}


def owners(sizes: dict[str, int], world: int) -> dict[str, int]:
    """Each name's rank: largest first, to the rank holding the fewest bytes so far."""
    load = [0] * world
    out: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        rank = min(range(world), key=lambda r: (load[r], r))
        out[name] = rank
        load[rank] += sizes[name]
    return out


def _sharded_model(model_name: str, dist) -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    from prl_trainer_torch.model import decoder_layers

    config = AutoConfig.from_pretrained(model_name)
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    mesh = init_device_mesh(dist.device.type, (dist.world,))
    for layer in decoder_layers(hf):
        fully_shard(layer, mesh=mesh)
    fully_shard(hf, mesh=mesh)
    hf.to_empty(device=dist.device)
    return hf


def export_rank(step_dir: Path, out: Path, dtype: str) -> Path:
    """This rank's part of the export (see the module docstring)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
    from torch.distributed.tensor import DTensor

    from prl_trainer_torch.export_files import check_checkpoint, export_tensors, model_source
    from prl_trainer_torch.model import init_distributed

    check_checkpoint(step_dir)
    dist = init_distributed()
    model_name, tokenizer = model_source(step_dir)
    hf = _sharded_model(model_name, dist)
    opts = StateDictOptions(full_state_dict=False)
    state = {"model": get_model_state_dict(hf, options=opts)}
    dcp.load(state, checkpoint_id=str(step_dir / "trainer"))
    set_model_state_dict(hf, state["model"], options=opts)

    tensors = export_tensors(hf)
    element = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    sizes = {n: t.numel() * element for n, t in tensors}
    owner = owners(sizes, dist.world)
    mine: dict[str, torch.Tensor] = {}
    for name, tensor in tensors:
        full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        if owner[name] == dist.rank:
            mine[name] = full.detach().to("cpu", DTYPES[dtype]).contiguous()
        del full
    _write_rank_files(mine, hf, out, dtype, dist)
    torch.distributed.barrier()  # every rank's file is on disk, so rank 0 can index them
    if dist.rank == 0:
        _write_side(hf.config, model_name, tokenizer, out, dtype, dist.world)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return out


def _write_rank_files(mine: dict, hf: torch.nn.Module, out: Path, dtype: str, dist) -> None:
    """This rank's safetensors file, in the layout ``save_pretrained`` writes (transformers
    fuses MoE experts into 3-D tensors in memory; files hold one 2-D weight per expert),
    quantized for fp8."""
    from safetensors.torch import save_file
    from transformers.core_model_loading import revert_weight_conversion

    from prl_trainer_torch.fp8_convert import shard_names

    mine = revert_weight_conversion(hf, mine)
    if dtype == "fp8":
        from prl_trainer_torch.fp8 import quantize_state

        mine = quantize_state(mine)
    out.mkdir(parents=True, exist_ok=True)
    save_file(mine, str(out / shard_names(dist.world)[dist.rank]), metadata={"format": "pt"})


def _write_side(config, model_name: str, tokenizer: str, out: Path, dtype: str, world: int) -> None:
    """Rank 0, once every rank's file is on disk: the index (read from the files' headers),
    config, generation config and tokenizer; for fp8 also ``quantization_config``."""
    from prl_trainer_torch.export_files import write_side_files
    from prl_trainer_torch.fp8_convert import finish_fp8_export, shard_names, write_index

    kept = write_index(out, shard_names(world))
    if dtype == "fp8":
        finish_fp8_export(config, model_name, tokenizer, out, kept)
    else:
        write_side_files(config, model_name, tokenizer, out, DTYPES[dtype])


def main(argv: list[str] | None = None) -> int:
    """``python -m prl_trainer_torch.export_dist <job.json>`` under torchrun."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m prl_trainer_torch.export_dist <job.json>", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text())
    try:
        export_rank(Path(job["checkpoint"]), Path(job["out"]), job["dtype"])
    except FileNotFoundError as exc:
        print(f"Export error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
