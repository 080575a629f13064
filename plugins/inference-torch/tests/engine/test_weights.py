"""Loading a trainer's weights and LoRA adapters into the served model: every tensor lands on
the parameter of its name, a directory of another architecture changes nothing, and an
adapter adds exactly ``scale * B A x`` to the rows that use it."""

from __future__ import annotations

import json
import math

import pytest
import torch
from prl_inference_torch.weights import (
    LoraSet,
    WeightError,
    apply_weights,
    architecture_mismatch,
    read_lora,
    read_weights,
)
from safetensors.torch import save_file


class Tiny(torch.nn.Module):
    """Embedding, two linear layers and an output head tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(6, 4)
        self.up = torch.nn.Linear(4, 8)
        self.down = torch.nn.Linear(8, 4, bias=False)
        self.head = torch.nn.Linear(4, 6, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x))


def trained(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A full state of new values: each parameter + 1, named as the model names them."""
    return {n: p.detach() + 1 for n, p in model.named_parameters()}


def test_saved_weights_replace_each_parameter_by_name(tmp_path):
    model = Tiny()
    new = trained(model)
    names = sorted(new)
    save_file({n: new[n] for n in names[:2]}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({n: new[n] for n in names[2:]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    save_file({"x.lora_A.weight": torch.zeros(1)}, str(tmp_path / "adapter_model.safetensors"))  # not read
    tensors = read_weights(str(tmp_path), model)
    assert sorted(tensors) == names
    apply_weights(model, tensors)
    for name, param in model.named_parameters():
        assert torch.equal(param, new[name]), name
    assert model.head.weight is model.embed.weight  # tying survives the copy


def test_weights_are_cast_to_the_served_dtype():
    model = Tiny().to(torch.bfloat16)
    new = {n: t.float() for n, t in trained(model).items()}
    apply_weights(model, new)
    assert model.up.weight.dtype == torch.bfloat16
    assert torch.equal(model.up.weight, new["up.weight"].to(torch.bfloat16))


def test_another_architecture_is_named_and_refused(tmp_path):
    model = Tiny()
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert architecture_mismatch(shapes, model) is None
    # the tied head counts as covered by the embedding it shares
    assert architecture_mismatch({k: v for k, v in shapes.items() if k != "head.weight"}, model) is None
    wrong = {**shapes, "up.weight": (8, 5), "extra.weight": (1,)}
    del wrong["down.weight"]
    assert architecture_mismatch(wrong, model) == (
        "unexpected: extra.weight; shape mismatch: up.weight; missing: down.weight"
    )
    three = {f"x{i}": (1,) for i in range(3)}
    assert architecture_mismatch({**shapes, **three}, model) == "unexpected: x0, x1, x2"
    four = {f"x{i}": (1,) for i in range(4)}
    assert architecture_mismatch({**shapes, **four}, model) == "unexpected: x0, x1, x2 ..."
    save_file({"up.weight": torch.zeros(8, 5)}, str(tmp_path / "model.safetensors"))
    before = model.up.weight.clone()
    with pytest.raises(WeightError, match="different architecture") as err:
        read_weights(str(tmp_path), model)
    assert "shape mismatch: up.weight" in str(err.value) and "missing: down.weight, embed.weight" in str(err.value)
    assert torch.equal(model.up.weight, before)


def test_a_directory_without_weights_is_refused(tmp_path):
    with pytest.raises(WeightError, match="does not exist"):
        read_weights(str(tmp_path / "nope"), Tiny())
    save_file({"a": torch.zeros(1)}, str(tmp_path / "adapter_model.safetensors"))
    with pytest.raises(WeightError, match="no \\*.safetensors"):
        read_weights(str(tmp_path), Tiny())


def write_adapter(path, tensors: dict[str, torch.Tensor], **cfg) -> str:
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps(cfg))
    return str(path)


def adapter(r: int = 2, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "base_model.model.up.lora_A.weight": torch.randn(r, 4, generator=g),
        "base_model.model.up.lora_B.weight": torch.randn(8, r, generator=g),
        "down.lora_A.default.weight": torch.randn(r, 8, generator=g),
        "down.lora_B.default.weight": torch.randn(4, r, generator=g),
    }


def test_adapter_scale_is_alpha_over_r_or_over_its_root(tmp_path):
    model = Tiny()
    plain = read_lora(write_adapter(tmp_path / "a", adapter(4), r=4, lora_alpha=8), model)
    assert sorted(plain) == ["down", "up"]
    assert plain["up"][2] == 2.0
    rs = read_lora(write_adapter(tmp_path / "b", adapter(4), r=4, lora_alpha=8, use_rslora=True), model)
    assert rs["up"][2] == 4.0
    default = read_lora(write_adapter(tmp_path / "c", adapter(8), r=8), model)
    assert default["down"][2] == 1.0  # alpha defaults to r
    unset = read_lora(write_adapter(tmp_path / "d", adapter(8)), model)
    assert unset["down"][2] == 1.0 and math.isclose(unset["up"][2], 1.0)
    no_rank = read_lora(write_adapter(tmp_path / "e", adapter(8), lora_alpha=16), model)
    assert no_rank["up"][2] == 2.0  # r defaults to PEFT's 8
    a, b, _ = plain["up"]
    assert torch.equal(a, adapter(4)["base_model.model.up.lora_A.weight"])
    assert torch.equal(b, adapter(4)["base_model.model.up.lora_B.weight"])


def test_an_adapter_that_does_not_fit_is_refused(tmp_path):
    model = Tiny()
    bad = {
        "stray": {"up.weight": torch.zeros(1)},
        "not linear": {"embed.lora_A.weight": torch.zeros(2, 4), "embed.lora_B.weight": torch.zeros(6, 2)},
        "half": {"up.lora_A.weight": torch.zeros(2, 4)},
        "in": {"up.lora_A.weight": torch.zeros(2, 5), "up.lora_B.weight": torch.zeros(8, 2)},
        "out": {"up.lora_A.weight": torch.zeros(2, 4), "up.lora_B.weight": torch.zeros(7, 2)},
        "rank": {"up.lora_A.weight": torch.zeros(2, 4), "up.lora_B.weight": torch.zeros(8, 3)},
    }
    reasons = {"stray": "unexpected tensor 'up.weight'", "not linear": "'embed' is not a linear layer",
               "half": "'up' is not a linear layer", "in": "shapes of 'up'", "out": "shapes of 'up'",
               "rank": "shapes of 'up'"}  # fmt: skip
    for name, tensors in bad.items():
        with pytest.raises(WeightError, match=reasons[name]):
            read_lora(write_adapter(tmp_path / name.replace(" ", "_"), tensors, r=2), model)
    with pytest.raises(WeightError, match="holds no LoRA tensors"):
        read_lora(write_adapter(tmp_path / "none", {}, r=2), model)
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightError, match="needs adapter_config.json"):
        read_lora(str(tmp_path / "empty"), model)
    (tmp_path / "cfg_only").mkdir()
    (tmp_path / "cfg_only" / "adapter_config.json").write_text("{}")
    with pytest.raises(WeightError, match="needs adapter_config.json"):
        read_lora(str(tmp_path / "cfg_only"), model)


def test_each_row_gets_its_own_adapter_delta(tmp_path):
    model = Tiny()
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(3))
    base_up = model.up(x)
    base = model(x)
    lora = LoraSet(model)
    first = read_lora(write_adapter(tmp_path / "a", adapter(2, seed=1), r=2, lora_alpha=4), model)
    only_up = {k: v for k, v in adapter(2, seed=2).items() if ".up." in k}
    second = read_lora(write_adapter(tmp_path / "b", only_up, r=2, lora_alpha=2), model)
    lora.load("first", first)
    lora.load("second", second)
    assert torch.equal(model(x), base)  # loaded, but no row uses an adapter yet
    lora.load("second", second)  # reloading adds no second hook
    # "second" comes first and has no adapter on `down`: "first" still gets its own there
    lora.set_rows(["second", None, "first", "first"], x.device)
    out = model(x)
    assert torch.equal(out[1], base[1])  # no adapter: the base model's output
    a1, b1, s1 = first["up"]
    up1 = base_up + 2.0 * (x @ a1.T) @ b1.T
    da, db, _ = first["down"]
    want1 = (model.down.weight @ up1.T).T + 2.0 * (up1 @ da.T) @ db.T
    assert s1 == 2.0
    assert torch.allclose(out[2], want1[2], atol=1e-5) and torch.allclose(out[3], want1[3], atol=1e-5)
    a2, b2, s2 = second["up"]
    up2 = base_up + s2 * (x @ a2.T) @ b2.T
    assert torch.allclose(out[0], model.down(up2)[0], atol=1e-5)  # "second" has no down adapter
    lora.set_rows([None] * 4, x.device)
    assert torch.equal(model(x), base)


def test_row_indices_live_on_the_device_set_rows_names(tmp_path):
    """Row indices made on torch's default device ('meta' here, the CPU on a GPU server)
    instead of the named one would not index the activations."""
    model = Tiny()
    lora = LoraSet(model)
    lora.load("a", read_lora(write_adapter(tmp_path / "a", adapter(2), r=2), model))
    with torch.device("meta"):
        lora.set_rows(["a", None], torch.device("cpu"))
    x = torch.ones(2, 4)
    assert model(x).shape == (2, 4)


def test_an_adapter_is_moved_to_the_served_device_and_dtype(tmp_path):
    model = Tiny().to(torch.bfloat16)
    a, b, _ = read_lora(write_adapter(tmp_path / "a", adapter(2), r=2), model)["up"]
    assert a.dtype == b.dtype == torch.bfloat16
    meta = Tiny().to("meta")
    a, b, _ = read_lora(write_adapter(tmp_path / "b", adapter(2), r=2), meta)["up"]
    assert a.device.type == b.device.type == "meta"
