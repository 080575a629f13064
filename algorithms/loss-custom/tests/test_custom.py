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
