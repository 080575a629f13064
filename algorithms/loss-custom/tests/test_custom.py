"""Custom loss: loading by module path and file path, kwargs, and the errors users see."""

import textwrap

import pytest
import torch
from prl_loss_custom.loss import CustomLoss
from pydantic import ValidationError

from prl.contracts.loss import LossInputs, LossOutputs
from prl.plugins import get_registry

FN = """
import torch
from prl.contracts.loss import LossOutputs

def scaled_pg(inputs, scale=1.0):
    per_token = -scale * inputs.advantages * inputs.trainer_logprobs * inputs.loss_mask
    return LossOutputs(loss=per_token, metrics={"scale": torch.tensor(scale)})

def bare(inputs):
    return -(inputs.advantages * inputs.trainer_logprobs).sum()

def not_a_loss(inputs):
    return "nope"
"""


@pytest.fixture
def loss_file(tmp_path):
    path = tmp_path / "my_losses.py"
    path.write_text(textwrap.dedent(FN))
    return path


def _inputs():
    return LossInputs(
        trainer_logprobs=torch.tensor([-1.0, -2.0], dtype=torch.float64, requires_grad=True),
        inference_logprobs=torch.tensor([-1.0, -2.0], dtype=torch.float64),
        advantages=torch.tensor([1.0, 3.0], dtype=torch.float64),
        loss_mask=torch.tensor([True, False]),
        rl_weights=None,
    )


def _build(import_path, **kwargs):
    return CustomLoss(get_registry().get("losses", "custom").Config(import_path=import_path, kwargs=kwargs))


def test_file_path_function_with_kwargs(loss_file):
    loss = _build(f"{loss_file}:scaled_pg", scale=2.0)
    inputs = _inputs()
    out = loss(inputs)
    assert isinstance(out, LossOutputs)
    assert out.loss.tolist() == pytest.approx([2.0, 0.0])
    out.loss.sum().backward()
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([-2.0, 0.0])
    assert float(out.metrics["scale"]) == 2.0


@pytest.mark.parametrize("sep", [".", ":"])
def test_module_path_forms(loss_file, monkeypatch, sep):
    monkeypatch.syspath_prepend(str(loss_file.parent))
    with torch.no_grad():
        out = _build(f"my_losses{sep}bare")(_inputs())
    assert out.loss.item() == pytest.approx(7.0)
    assert out.metrics == {}


def test_malformed_path_is_rejected_at_config_time():
    with pytest.raises(ValidationError, match="import_path"):
        CustomLoss.Config(import_path="no_function_here")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/nonexistent/dir/f.py:fn", "does not exist"),
        ("prl_no_such_module.fn", "cannot import"),
        ("{file}:missing", "has no attribute 'missing'"),
    ],
)
def test_load_errors_name_the_import_path(loss_file, path, message):
    path = path.format(file=loss_file)
    with pytest.raises(ValueError, match=message) as info:
        _build(path)
    assert "import_path" in str(info.value)


def test_kwargs_are_checked_against_the_signature(loss_file):
    with pytest.raises(ValueError, match="kwargs do not fit"):
        _build(f"{loss_file}:scaled_pg", scael=2.0)


def test_wrong_return_type_is_reported(loss_file):
    with pytest.raises(TypeError, match="returned str"):
        _build(f"{loss_file}:not_a_loss")(_inputs())


PER_SAMPLE = """
import torch
from prl.contracts.loss import LossOutputs

CALLS = []

def weighted(inputs):
    CALLS.append(len(inputs.trainer_logprobs))
    per_token = -inputs.loss_weights * inputs.advantages * inputs.trainer_logprobs * inputs.loss_mask
    return LossOutputs(loss=per_token, metrics={"tokens": torch.tensor(float(len(per_token)))})
"""


def test_called_once_per_packed_sample_with_loss_weights(tmp_path):
    path = tmp_path / "per_sample.py"
    path.write_text(textwrap.dedent(PER_SAMPLE))
    loss = _build(f"{path}:weighted")
    logp = torch.tensor([-1.0, -2.0, -3.0], dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(
        trainer_logprobs=logp,
        inference_logprobs=torch.tensor([-1.0, -2.0, -3.0], dtype=torch.float64),
        advantages=torch.tensor([1.0, 1.0, -2.0], dtype=torch.float64),
        loss_mask=torch.tensor([True, True, True]),
        rl_weights=torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64),
        seq_lens=[2, 1],
    )
    assert inputs.loss_weights is inputs.rl_weights
    out = loss(inputs)
    assert loss.fn.__globals__["CALLS"] == [2, 1]  # one call per sample, with its own tokens
    # -(1*1*-1) - (.5*1*-2) - (2*-2*-3) = 1 + 1 - 12
    assert float(out.loss.sum()) == pytest.approx(-10.0)
    out.loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-1.0, -0.5, 4.0])
    assert float(out.metrics["tokens"]) == pytest.approx(1.5)  # mean over the two samples


def test_a_packed_sample_without_rl_tokens_is_not_handed_to_the_function(tmp_path):
    path = tmp_path / "per_sample.py"
    path.write_text(textwrap.dedent(PER_SAMPLE))
    loss = _build(f"{path}:weighted")
    inputs = LossInputs(
        trainer_logprobs=torch.tensor([-1.0, -2.0, -3.0], dtype=torch.float64, requires_grad=True),
        inference_logprobs=torch.zeros(3, dtype=torch.float64),
        advantages=torch.ones(3, dtype=torch.float64),
        loss_mask=torch.tensor([False, True, True]),
        rl_weights=torch.ones(3, dtype=torch.float64),
        seq_lens=[1, 2],
    )
    out = loss(inputs)
    assert loss.fn.__globals__["CALLS"] == [2]
    assert float(out.loss.sum()) == pytest.approx(5.0)
