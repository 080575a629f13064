"""Cross-component checks of ``prl rl`` (``docs/configuration.md``, RL: shared fields):
W&B on both sides or neither with one project, a component's ``output_dir`` equal to the
run's, ``rollout_transport`` shared by trainer and orchestrator, and an ``auto`` renderer
that can map its model, each refused at ``--dry-run`` as one line with exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

pytestmark = pytest.mark.usefixtures("fake_plugins", "hf_cache")
SRC = '[{"name": "t", "env": {"taskset": {"id": "fake-tasks"}}}]'


def _rl(out, *extra: str):
    argv = ["rl", "--output-dir", str(out), "--run.name", "r", "--orchestrator.train.source", SRC, "--dry-run"]
    return CliRunner().invoke(app, [*argv, *extra])


def _resolved(out, name: str) -> dict:
    return json.loads((out / "r" / "configs" / "latest" / "resolved" / f"{name}.json").read_text())


def _usage_error(result, text: str) -> None:
    assert result.exit_code == 2, result.output
    assert text in result.output and "Traceback" not in result.output


@pytest.fixture
def wandb_installed():
    pytest.importorskip("prl_monitor_wandb")


def test_wandb_on_one_side_only_is_refused(tmp_path, wandb_installed):
    result = _rl(tmp_path, "--trainer.monitors.wandb")
    _usage_error(result, "monitors.wandb is on for the trainer but not the orchestrator")


def test_wandb_projects_must_match(tmp_path, wandb_installed):
    result = _rl(tmp_path, "--trainer.monitors.wandb.project", "x", "--orchestrator.monitors.wandb.project", "y")
    _usage_error(result, "monitors.wandb.project differs: trainer 'x', orchestrator 'y'")


def test_shared_wandb_section_turns_both_on_with_one_project(tmp_path, wandb_installed):
    result = _rl(tmp_path, "--monitors.wandb.project", "x")
    assert result.exit_code == 0, result.output
    assert _resolved(tmp_path, "trainer")["monitors"]["wandb"]["project"] == "x"
    assert _resolved(tmp_path, "orchestrator")["monitors"]["wandb"]["project"] == "x"


def test_a_component_output_dir_that_differs_from_the_run_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PRL_OUTPUT_DIR", str(tmp_path))
    argv = ["rl", "--run.name", "r", "--orchestrator.train.source", SRC, "--dry-run"]
    result = CliRunner().invoke(app, [*argv, "--trainer.output-dir", str(tmp_path / "elsewhere")])
    _usage_error(result, f"trainer.output_dir '{tmp_path / 'elsewhere'}' differs from the run's output_dir")
    # the same directory is accepted, so a dumped config loads back
    assert CliRunner().invoke(app, [*argv, "--trainer.output-dir", str(tmp_path)]).exit_code == 0


def test_a_component_output_dir_conflicting_with_the_given_one_is_refused(tmp_path):
    result = _rl(tmp_path, "--orchestrator.output-dir", str(tmp_path / "x"))
    _usage_error(result, "Shared config conflicts with matching sub-config field(s)")


def test_rollout_transport_reaches_trainer_and_orchestrator(tmp_path):
    result = _rl(tmp_path, "--rollout-transport.type", "zmq", "--rollout-transport.port", "6000")
    assert result.exit_code == 0, result.output
    for name in ("trainer", "orchestrator"):
        transport = _resolved(tmp_path, name)["rollout_transport"]
        assert (transport["type"], transport["port"]) == ("zmq", 6000)
    clash = _rl(tmp_path / "b", "--rollout-transport.type", "zmq", "--trainer.rollout-transport.type", "filesystem")
    _usage_error(clash, "rollout_transport.type='zmq' vs trainer.rollout_transport.type='filesystem'")


def test_auto_renderer_with_an_unmapped_model_fails_at_dry_run(tmp_path, hf_cache):
    pytest.importorskip("prl_renderers")
    hf_cache("org/Unmapped", mapped=False)
    result = _rl(tmp_path, "--model.name", "org/Unmapped")
    _usage_error(result, "--orchestrator.renderer.name: renderer 'auto': no renderer is mapped for model")
    assert not (tmp_path / "r").exists()
    # naming a renderer is the fix the message gives
    assert _rl(tmp_path, "--model.name", "org/Unmapped", "--orchestrator.renderer.name", "default").exit_code == 0


def _dumped_rl(tmp_path, *flags: str):
    """The whole resolved config as the SLURM launcher writes it (resolved/rl.json)."""
    from prl.config.resolve import resolve
    from prl.config.roots import RLConfig

    argv = ["--output-dir", str(tmp_path / "a"), "--run.name", "r", "--orchestrator.train.source", SRC, *flags]
    path = tmp_path / "rl.json"
    path.write_text(resolve(RLConfig, argv).config.model_dump_json(indent=2))
    return path


@pytest.mark.parametrize(
    ("flag", "value", "trainer_path", "orchestrator_path"),
    [
        ("--max-steps", "7", "max_steps", "max_steps"),
        ("--run.name", "r2", "run.name", "run.name"),
        ("--seq-len", "640", "model.seq_len", "seq_len"),
    ],
)
def test_a_dumped_rl_config_loads_back_with_a_shared_field_changed(
    tmp_path, flag, value, trainer_path, orchestrator_path
):
    # rl.json carries each shared value's copies in the components; a flag that changes the
    # shared value replaces those copies instead of clashing with them
    dumped = _dumped_rl(tmp_path, "--max-steps", "3", "--seq-len", "512")
    out = tmp_path / "b"
    argv = ["rl", f"@{dumped}", "--output-dir", str(out), "--dry-run", flag, value]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    run = out / (value if flag == "--run.name" else "r") / "configs" / "latest" / "resolved"
    for component, path in (("trainer", trainer_path), ("orchestrator", orchestrator_path)):
        node = json.loads((run / f"{component}.json").read_text())
        for part in path.split("."):
            node = node[part]
        assert str(node) == value, (component, node)


def test_a_dumped_rl_config_still_refuses_a_component_value_that_disagrees(tmp_path):
    dumped = _dumped_rl(tmp_path, "--max-steps", "3")
    argv = ["rl", f"@{dumped}", "--output-dir", str(tmp_path / "b"), "--dry-run"]
    result = CliRunner().invoke(app, [*argv, "--max-steps", "7", "--trainer.max-steps", "5"])
    _usage_error(result, "max_steps='7' vs trainer.max_steps='5'")


def test_a_dumped_rl_config_keeps_the_components_monitors_and_checkpoints(tmp_path):
    # rl.json writes the shared [ckpt] and [monitors.<key>] the user never set as null; read
    # back, those nulls must not switch off what the components had (console and file
    # monitors by default, checkpoints set on the trainer and orchestrator themselves)
    dumped = _dumped_rl(tmp_path, "--trainer.ckpt.interval", "5", "--orchestrator.ckpt.interval", "5")
    assert json.loads(dumped.read_text())["monitors"]["console"] is None
    out = tmp_path / "b"
    result = CliRunner().invoke(app, ["rl", f"@{dumped}", "--output-dir", str(out), "--dry-run"])
    assert result.exit_code == 0, result.output
    resolved = out / "r" / "configs" / "latest" / "resolved"
    trainer = json.loads((resolved / "trainer.json").read_text())
    orchestrator = json.loads((resolved / "orchestrator.json").read_text())
    for component in (trainer, orchestrator):
        assert component["monitors"]["console"] is not None and component["monitors"]["file"] is not None
    assert trainer["ckpt"]["interval"] == 5 and orchestrator["ckpt"]["interval"] == 5
