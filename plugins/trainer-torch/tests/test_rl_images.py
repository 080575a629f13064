"""RL with images in the trainer: a micro-batch's per-document images reach the policy
(``rl_step``), and the vision-language policy (``vision_rl.PackedVisionPolicy``) scores a
packed micro-batch as each document alone with its own pixels; an image token the policy
sampled is an ordinary token, as the sampler embedded it."""

from __future__ import annotations

import base64
import io

import pytest
import torch
from prl_trainer_torch.rl_step import forward_tokens, to_micro_batch

from prl.images import load_image, process_images
from prl.orchestrator.packing import micro_batch
from prl.types import TrainingSample

CPU = torch.device("cpu")


def _png(colour: str) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), colour).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _sample(ids: list[int], images: list[str] | None) -> TrainingSample:
    n = len(ids)
    return TrainingSample(
        input_ids=list(ids), loss_mask=[True] * n, advantages=[1.0] * n, inference_logprobs=[-1.0] * n,
        temperature=1.0, rl_weights=[1.0] * n, ce_weights=[0.0] * n, ref_kl_weights=[0.0] * n, env_name="e",
        images=images,
    )  # fmt: skip


class Recording(torch.nn.Module):
    """A policy that records the images it is handed and scores every token -1."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def forward(self, input_ids, position_ids, targets, temps, entropy=False, bounds=None, **extra):
        self.seen.append(extra.get("images", "none"))
        zeros = torch.zeros(input_ids.shape, dtype=torch.float32)
        return zeros - 1.0, zeros


def test_a_micro_batch_hands_each_documents_images_to_the_policy():
    red = _png("red")
    mb = to_micro_batch(micro_batch([_sample([1, 2, 3], [red]), _sample([4, 5], None)]), CPU)
    assert mb.images == [[red], []]
    policy = Recording()
    forward_tokens(policy, mb)
    assert policy.seen == [[[red], []]]
    # a text micro-batch gives a text policy no images keyword at all
    text = to_micro_batch(micro_batch([_sample([4, 5], None)]), CPU)
    assert text.images is None
    forward_tokens(policy, text)
    assert policy.seen[-1] == "none"


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    from prl_model_init import make_model
    from prl_trainer_torch.vision_policy import VisionPolicy, load_vision_model
    from prl_trainer_torch.vision_rl import PackedVisionPolicy
    from transformers import AutoImageProcessor

    from prl.config.policy import VLMConfig

    path = make_model(tmp_path_factory.mktemp("vl") / "m", preset="tiny-qwen3.5-vl", seed=0)
    hf = load_vision_model(str(path), torch.float32, VLMConfig()).eval()
    torch.manual_seed(1)
    with torch.no_grad():  # spread weights, so logprobs depend on what the model is shown
        for p in hf.parameters():
            if p.dim() >= 2:
                p.add_(torch.randn_like(p) * 0.3)
    vision = VisionPolicy(hf)
    return vision, PackedVisionPolicy(vision, AutoImageProcessor.from_pretrained(path))


def _prompt(vision, n_pads: int) -> list[int]:
    return [5, 6, vision.image_token_id - 1] + [vision.image_token_id] * n_pads + [vision.image_token_id + 1, 7, 8, 9]


def _alone(vision, ids: list[int], pixels) -> torch.Tensor:
    t = torch.tensor([ids])
    return vision(t, torch.roll(t, -1), pixels, 1.0)[0][0]


def test_the_packed_policy_scores_each_document_with_its_own_pixels(vl):
    vision, packed = vl
    red, blue = _png("red"), _png("blue")
    pix = {c: process_images([load_image(c)], packed.image_processor) for c in (red, blue)}
    a, b, text = _prompt(vision, 16), _prompt(vision, 16), [3, 4, 5, 6]
    ids = torch.tensor([a + b + text])
    pos = torch.tensor([list(range(len(a))) + list(range(len(b))) + list(range(len(text)))])
    with torch.no_grad():
        logp, _ = packed(ids, pos, torch.roll(ids, -1), torch.ones_like(ids, dtype=torch.float32), True,
                         images=[[red], [blue], []])  # fmt: skip
        want = torch.cat([_alone(vision, a, pix[red]), _alone(vision, b, pix[blue]), _alone(vision, text, None)])
    ends = [len(a) - 1, len(a) + len(b) - 1, ids.shape[1] - 1]  # a document's last target is the next one's start
    keep = [i for i in range(ids.shape[1]) if i not in ends]
    assert torch.allclose(logp[0, keep], want[keep], atol=1e-5)
    # the images matter: the same tokens with the other image score differently
    swapped = _alone(vision, a, pix[blue])
    assert not torch.allclose(swapped[: len(a) - 1], want[: len(a) - 1], atol=1e-3)


def test_an_image_token_the_policy_sampled_is_an_ordinary_token(vl):
    vision, packed = vl
    red = _png("red")
    prompt = _prompt(vision, 16)
    pix = process_images([load_image(red)], packed.image_processor)
    with torch.no_grad():
        plain = _alone(vision, prompt, pix)
        sampled = _alone(vision, prompt + [vision.image_token_id, 4], pix)  # the policy wrote an image token
    # the prompt's image is placed as before; positions before the extra token are unchanged
    assert torch.allclose(sampled[: len(prompt) - 1], plain[: len(prompt) - 1], atol=1e-5)
    with pytest.raises(ValueError, match="document 0: 15 image tokens for 1 image"):
        ids = torch.tensor([_prompt(vision, 15)])
        packed(ids, torch.arange(ids.shape[1])[None], ids, torch.ones(ids.shape), images=[[red]])


def test_truncated_sampling_is_replayed_over_each_documents_kept_ids(vl):
    """top_p / top_k sampling: the sampler's kept ids per token come with the micro-batch, and
    each document's logprobs are renormalised over them, with its own pixels, as the text
    policy does; a kept set that is not the trainer's top ids, or leaves the target out, is
    flagged."""
    vision, packed = vl
    red, blue = _png("red"), _png("blue")
    pix = {c: process_images([load_image(c)], packed.image_processor) for c in (red, blue)}
    a, b = _prompt(vision, 16), _prompt(vision, 16)
    with torch.no_grad():  # each document's last token is its model's first choice there
        a[-1] = int(_logits(vision, a, pix[red])[-2].argmax())
        b[-1] = int(_logits(vision, b, pix[blue])[-2].argmax())
        full = torch.cat([_logits(vision, a, pix[red]), _logits(vision, b, pix[blue])])
    ids = torch.tensor([a + b])
    pos = torch.tensor([list(range(len(a))) + list(range(len(b)))])
    targets = torch.roll(ids, -1)
    top = full.topk(5, -1).indices
    kept = torch.zeros(1, ids.shape[1], 4, dtype=torch.long)
    valid = torch.zeros(1, ids.shape[1], 4, dtype=torch.bool)
    agree, other, outside = len(a) - 2, len(a) - 3, ids.shape[1] - 2
    kept[0, agree] = top[agree, :4]  # the trainer's own top 4, the target first among them
    kept[0, other] = torch.tensor([int(targets[0, other]), 11, 12, 13])
    kept[0, outside] = top[outside, 1:5]  # the target (its top id) left out
    valid[0, [agree, other, outside]] = True
    with torch.no_grad():
        logp, _, mask_logp, flags = packed(ids, pos, targets, torch.ones_like(ids, dtype=torch.float32), True,
                                           images=[[red], [blue]], replay=(kept, valid))  # fmt: skip
    for p in (agree, other, outside):
        assert torch.allclose(mask_logp[0, p], torch.log_softmax(full[p][kept[0, p]], -1), atol=1e-4)
    # a kept target scores its kept-set logprob, one left out its full one
    assert torch.allclose(logp[0, agree], torch.log_softmax(full[agree][kept[0, agree]], -1)[0], atol=1e-4)
    assert torch.allclose(logp[0, outside], torch.log_softmax(full[outside], -1)[targets[0, outside]], atol=1e-4)
    assert flags[0, [agree, other, outside]].tolist() == [False, True, True]
    assert int(flags.sum()) == 2


def _logits(vision, ids: list[int], pixels) -> torch.Tensor:
    """Full next-token logits of one document with its pixels, from the image-text model's
    own forward (what the sampler's distribution is before truncation)."""
    t = torch.tensor([ids])
    out = vision.hf(input_ids=t, pixel_values=pixels.pixel_values, image_grid_thw=pixels.image_grid_thw,
                    mm_token_type_ids=(t == vision.image_token_id).int(), use_cache=False)  # fmt: skip
    return out.logits[0].float()


def test_the_packed_policy_processes_images_under_the_model_vlm_pixel_bounds(vl):
    """[model.vlm] max_pixels: the trainer resizes each image as the server did when it
    widened the placeholder (4 patch tokens for a 64x64 image bounded to 32x32 pixels, not
    16), and scores the document with those pixels."""
    from prl_trainer_torch.vision_rl import PackedVisionPolicy

    from prl.config.policy import VLMConfig

    vision, packed = vl
    bounds = VLMConfig(max_pixels=32 * 32)
    bounded = PackedVisionPolicy(vision, packed.image_processor, bounds)
    red = _png("red")
    ids = torch.tensor([_prompt(vision, 4)])
    pos, temps = torch.arange(ids.shape[1])[None], torch.ones(ids.shape)
    with torch.no_grad():
        logp, _ = bounded(ids, pos, torch.roll(ids, -1), temps, images=[[red]])
        pix = process_images([load_image(red)], packed.image_processor, bounds)
        assert torch.allclose(logp[0, :-1], _alone(vision, _prompt(vision, 4), pix)[:-1], atol=1e-5)
    with pytest.raises(ValueError, match="document 0: 4 image tokens for 1 image"):
        packed(ids, pos, torch.roll(ids, -1), temps, images=[[red]])  # without the bounds: 16 expected
