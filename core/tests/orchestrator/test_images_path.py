"""A vision-language prompt's images travel with its branch: rollout → branch → env wire →
training sample → micro-batch, one image list per packed document (empty for a text one),
so the trainer runs each document with the images the sampler saw."""

from __future__ import annotations

from prl.envs.wire import trace_from_dict, trace_to_dict
from prl.orchestrator.packing import micro_batch, pack
from prl.orchestrator.samples import trace_to_samples
from prl.tasks.branches import add_sampled, start_branch
from prl.types import Generation, Trace

RED, BLUE = "data:image/png;base64,UkVE", "data:image/png;base64,QkxVRQ=="


def _trace(tid: str, prompt: list[int], images: list[str] | None) -> Trace:
    branch = start_branch(prompt)
    branch.images = images
    add_sampled(branch, Generation([7, 8], [-0.5, -0.5], "stop"))
    branch.advantages = [1.0] * (len(prompt) + 2)
    return Trace(tid, "task", "env", [branch])


def test_images_reach_the_micro_batch_one_list_per_document():
    seen = trace_from_dict(trace_to_dict(_trace("a", [1, 9, 9, 2], [RED, BLUE])))  # over the env wire
    assert seen.branches[0].images == [RED, BLUE]
    text = _trace("b", [1, 2], None)
    samples = trace_to_samples(seen, seq_len=16).samples + trace_to_samples(text, 16).samples
    assert samples[0].images == [RED, BLUE] and samples[1].images is None
    mb = micro_batch(samples)
    assert mb["images"] == [[RED, BLUE], []]
    assert len(mb["images"]) == len(mb["seq_lens"]) == 2
    # a micro-batch of text documents carries no image field at all
    assert "images" not in micro_batch(samples[1:])


def test_packing_keeps_each_documents_images_with_it():
    traces = [_trace("a", [1, 9, 2], [RED]), _trace("b", [1, 2, 3, 4, 5], None), _trace("c", [1, 9, 9, 2], [BLUE])]
    samples = [s for t in traces for s in trace_to_samples(t, 16).samples]
    (rank,) = pack(samples, seq_len=16, ranks=1)
    by_trace = {}
    for mb in rank:
        for tid, imgs in zip(mb["trace_ids"], mb.get("images") or [[]] * len(mb["trace_ids"]), strict=True):
            by_trace[tid] = imgs
    assert by_trace == {"a": [RED], "b": [], "c": [BLUE]}
