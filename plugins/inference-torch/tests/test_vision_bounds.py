"""``[model.vlm]``'s pixel bounds on the server: ``prl rl`` shares ``model.vlm`` with the
inference server, and the torch engine widens each image placeholder to the patch count of
the image resized under ``min_pixels`` / ``max_pixels``, the count the trainer's policy
expects for the same image under the same bounds (``prl.images.process_images``)."""

from __future__ import annotations

import pytest
from prl_inference_torch.loading import load_state

from prl.config.components import InferenceConfig
from prl.config.policy import VLMConfig
from prl.images import load_image, process_images
from prl.testing.images import png_url


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory) -> str:
    from prl_model_init import make_model

    return str(make_model(tmp_path_factory.mktemp("vl") / "m", preset="tiny-qwen3.5-vl", seed=0))


def _vision(model: str, vlm: dict | None):
    backend = {"type": "torch", "device": "cpu", "max_batch_size": 2, "num_threads": 1}
    st = load_state(InferenceConfig.model_validate({"model": {"name": model, "vlm": vlm}, "backend": backend}), None)
    st.engine.shutdown()
    return st.vision


def test_the_server_widens_images_under_the_model_vlm_pixel_bounds(vl_model):
    default, bounded = _vision(vl_model, None), _vision(vl_model, {"max_pixels": 32 * 32})
    pad = default.image_token_id
    image = png_url("red", 64)
    wide, _ = default.widen([1, pad, 2], [image])
    narrow, _ = bounded.widen([1, pad, 2], [image])
    assert wide.count(pad) == 16 and narrow.count(pad) == 4  # 64x64 px scaled to 32x32
    # the count the trainer computes for the same image and bounds
    want = process_images([load_image(image)], bounded.image_processor, VLMConfig(max_pixels=32 * 32))
    assert want.tokens_per_image(bounded.merge_size) == [4]
