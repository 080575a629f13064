"""``trainer.annotations``: per-token records of each trained trace branch, from a real RL
micro-batch step on a tiny policy to the file monitor's annotation stream."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import socket

import pytest
import torch
from prl_monitor_file import read_annotations
from prl_trainer_torch import annotations as notes
from prl_trainer_torch.logprobs import chunked_logprobs
from prl_trainer_torch.rl_step import run_micro_batches, to_micro_batch, token_logprobs
from prl_trainer_torch.token_export import TokenExporter

from prl.config.components import TrainerConfig
from prl.contracts.monitor import build_monitors
from prl.orchestrator.packing import dummy_micro_batch, micro_batch
from prl.types import TrainingSample

CPU = torch.device("cpu")
BASE = {"weight_broadcast": {"type": "filesystem"}}


class TinyPolicy(torch.nn.Module):
    """An embedding scaled by position, scored by an output matrix (the real log-prob kernel)."""

    def __init__(self, vocab: int = 12, dim: int = 6) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.head = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))

    def forward(self, input_ids, position_ids, targets, temps, entropy=False, bounds=None):
        h = self.emb[input_ids] * (1 + 0.1 * position_ids[..., None].float())
        return chunked_logprobs(h, self.head, targets, temps, chunk_size=4, entropy=entropy)


def _sample(ids, trace_id, branch, adv, env="a") -> TrainingSample:
    n = len(ids)
    s = TrainingSample(list(ids), [True] * n, list(adv), [-1.0] * n, 1.0, [1.0] * n, [0.0] * n, [0.0] * n, env)
    s.trace_id, s.branch_index = trace_id, branch
    return s


def _samples():
    return (
        _sample([1, 2, 3, 4, 5], "trace-a", 0, [0.0, 0.5, 0.5, -0.25, 2.0]),
        _sample([6, 7, 8], "trace-b", 2, [0.0, -1.0, -1.0], env="b"),
    )


def _alone(policy, sample) -> tuple[list[float], list[float]]:
    """The policy's logprobs and entropies of one sample packed on its own."""
    with torch.no_grad():
        logp, ent = token_logprobs(policy, to_micro_batch(micro_batch([sample]), CPU))
    return logp.tolist(), ent.tolist()


def test_each_trained_branch_gets_its_own_token_aligned_record():
    policy = TinyPolicy()
    a, b = _samples()
    mbs = [to_micro_batch(r, CPU) for r in (micro_batch([a, b]), dummy_micro_batch(), micro_batch([b]))]
    collector = notes.AnnotationCollector(rank=0, world=1, loss_name="ipo")
    collector.begin(7)
    loss = TrainerConfig.model_validate(BASE | {"loss": {"type": "ipo"}}).loss.build()
    run_micro_batches(policy, loss, mbs, world=1, export=notes.Fanout(None, collector))
    records = collector.gather()
    # padding trains nothing and is not annotated; b appears once per micro-batch it was in
    assert [(r["trace_id"], r["branches"][0]["index"]) for r in records] == [
        ("trace-a", 0), ("trace-b", 2), ("trace-b", 2),
    ]  # fmt: skip
    assert [r["info"] for r in records] == [
        {"step": 7, "rank": 0, "loss": "ipo", "env": env, "micro_step": m} for env, m in (("a", 0), ("b", 0), ("b", 2))
    ]
    for record, sample in zip(records, (a, b, b), strict=True):
        (branch,) = record["branches"]
        assert record["version"] == 1
        assert set(branch) == {"index", "advantages", "trainer_logprobs", "entropies", "loss_mask"}
        n = len(sample.input_ids)
        assert all(len(branch[k]) == n for k in branch if k != "index")
        assert branch["advantages"] == sample.advantages
        assert branch["loss_mask"] == [False] + [True] * (n - 1)  # the first token has no prediction
        logp, ent = _alone(policy, sample)
        assert branch["trainer_logprobs"][0] is None and branch["entropies"][0] is None
        for got, want in zip(branch["trainer_logprobs"][1:] + branch["entropies"][1:], logp[1:] + ent[1:], strict=True):
            assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6)
        assert all(v < 0 for v in branch["trainer_logprobs"][1:]) and all(v > 0 for v in branch["entropies"][1:])


def test_records_sit_beside_a_token_export_and_reach_only_monitors_that_keep_them(tmp_path):
    """Rank 0 logs through the file monitor (console ignores annotations); a reader then
    finds each trace's arrays by trace id, next to the token export of the same step."""
    policy = TinyPolicy()
    a, b = _samples()
    config = TrainerConfig.model_validate(BASE | {"output_dir": str(tmp_path)})
    monitors = build_monitors(config, tmp_path, "trainer")
    assert {type(m).__name__ for m in monitors} >= {"FileMonitor", "ConsoleMonitor"}
    collector = notes.AnnotationCollector(0, 1, config.loss.type)
    exporter = TokenExporter(tmp_path, rank=0, world=1, loss_config=config.loss)
    collector.begin(3)
    exporter.begin(3)
    mb = to_micro_batch(micro_batch([a, b]), CPU)
    run_micro_batches(policy, config.loss.build(), [mb], world=1, export=notes.Fanout(exporter, collector))
    exporter.finish()
    notes.log_annotations(monitors, collector.gather(), 3)
    for m in monitors:
        m.close()
    file_dir = tmp_path / "monitors" / "file"
    (rec_a,) = read_annotations(file_dir, "trainer", "trace-a")
    (rec_b,) = read_annotations(file_dir, "trainer", "trace-b")
    assert rec_a["branches"][0]["index"] == 0 and rec_b["branches"][0]["index"] == 2
    assert len(rec_a["branches"][0]["entropies"]) == 5 and len(rec_b["branches"][0]["trainer_logprobs"]) == 3
    logp, _ = _alone(policy, a)
    assert rec_a["branches"][0]["trainer_logprobs"][1:] == [round(v, 4) for v in logp[1:]]  # float_decimals
    assert (tmp_path / "token_exports" / "step_3" / "rank_0.jsonl").read_text().count("\n") == 2


def test_the_switch_and_the_monitor_set_decide_whether_a_run_collects():
    assert notes.wanted(TrainerConfig.model_validate(BASE))
    assert not notes.wanted(TrainerConfig.model_validate(BASE | {"annotations": False}))
    # without the file monitor no configured monitor keeps annotations: nothing to gather
    assert not notes.wanted(TrainerConfig.model_validate(BASE | {"monitors": {"file": None}}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        sample = _samples()[rank]
        mb = to_micro_batch(micro_batch([sample]), CPU)
        collector = notes.AnnotationCollector(rank, 2, "ipo")
        collector.begin(1)
        with torch.no_grad():
            collector.add(0, mb, *token_logprobs(TinyPolicy(), mb))
        out.put((rank, [(r["trace_id"], r["info"]["rank"]) for r in collector.gather()]))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_gather_every_record_on_rank_0():
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert got == {0: [("trace-a", 0), ("trace-b", 1)], 1: []}
