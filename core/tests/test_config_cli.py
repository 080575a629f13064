"""Flag syntax, precedence and plugin-composed unions through the real CLI parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prl.cli.main import app
from prl.config.errors import ConfigError
from prl.config.resolve import resolve
from prl.config.roots import RLConfig, SFTConfig

SRC = '[{"name": "a", "env": {"taskset": {"id": "fake-tasks"}}}]'


def rl(argv: list[str]) -> RLConfig:
    return resolve(RLConfig, argv).config


def test_equals_and_space_forms(fake_plugins):
    a = rl(["--trainer.optim.lr", "3e-6"])
    b = rl(["--trainer.optim.lr=3e-6"])
    assert a.trainer.optim.lr == b.trainer.optim.lr == 3e-6


def test_kebab_and_snake_spellings(fake_plugins):
    assert rl(["--orchestrator.batch-size", "64"]).orchestrator.batch_size == 64
    assert rl(["--orchestrator.batch_size", "64"]).orchestrator.batch_size == 64


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--trainer.model.activation-checkpointing"], True),
        (["--no-trainer.model.activation-checkpointing"], False),
        (["--trainer.model.activation-checkpointing", "False"], False),
        (["--trainer.model.activation-checkpointing=1"], True),
    ],
)
def test_booleans(argv, expected, fake_plugins):
    assert rl(argv).trainer.model.activation_checkpointing is expected


def test_none_string(fake_plugins, tmp_path):
    assert rl(["--trainer.max-steps", "None"]).trainer.max_steps is None
    f = tmp_path / "c.toml"
    f.write_text('[orchestrator.train.sampling]\ntop_k = "None"\n')
    assert rl(["@", str(f)]).orchestrator.train.sampling.top_k is None


def test_lists_space_separated_json_and_negative_numbers(fake_plugins):
    assert rl(["--trainer.optim.betas", "0.9", "0.95"]).trainer.optim.betas == (0.9, 0.95)
    assert rl(["--trainer.optim.betas", "[0.8, 0.9]"]).trainer.optim.betas == (0.8, 0.9)
    cfg = resolve(SFTConfig, ["--data.probabilities", "-1e-3", "0.5", "--data.subsets", "a", "b"]).config
    assert cfg.data.probabilities == [-1e-3, 0.5]


def test_cli_list_replaces_file_list(fake_plugins, tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(
        '[trainer.optim]\nbetas = [0.1, 0.2]\n[[orchestrator.train.source]]\nname="x"\nenv.taskset.id="fake-tasks"\n'
    )
    cfg = rl(["@", str(f), "--orchestrator.train.source", SRC])
    assert [s.name for s in cfg.orchestrator.train.source] == ["a"]


def test_per_item_path_updates_list_item(fake_plugins, tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[[orchestrator.train.source]]\nname="x"\nenv.taskset.id="fake-tasks"\n')
    cfg = rl(["@", str(f), "--orchestrator.train.source.0.ratio", "2.5"])
    assert cfg.orchestrator.train.source[0].ratio == 2.5 and cfg.orchestrator.train.source[0].name == "x"


def test_dicts_deep_merge(fake_plugins, tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[env_vars]\nA = "1"\nB = "2"\n')
    cfg = rl(["@", str(f), "--env-vars", '{"B": "3", "C": "4"}'])
    assert cfg.env_vars == {"A": "1", "B": "3", "C": "4"}


def test_optional_section_bare_flag_header_and_off(fake_plugins, tmp_path):
    assert rl([]).trainer.ckpt is None
    cfg = rl(["--ckpt"])
    assert cfg.trainer.ckpt is not None and cfg.orchestrator.ckpt is not None
    assert rl(["--ckpt.interval", "50"]).trainer.ckpt.interval == 50
    f = tmp_path / "c.toml"
    f.write_text("[ckpt]\n")
    assert rl(["@", str(f)]).orchestrator.ckpt is not None
    assert rl(["@", str(f), "--no-ckpt"]).trainer.ckpt is None
    assert rl(["@", str(f), "--ckpt", "None"]).trainer.ckpt is None
    assert rl(["--no-inference"]).inference is None


def test_discriminated_union_by_type(fake_plugins):
    cfg = rl(["--trainer.loss.type", "other_fake_loss", "--trainer.loss.ratio-low", "0.7"])
    assert type(cfg.trainer.loss).__qualname__ == "OtherFakeLoss.Config"
    assert cfg.trainer.loss.ratio_low == 0.7


def test_precedence_cli_over_files_over_defaults(fake_plugins, tmp_path):
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text("[trainer.optim]\nlr = 1e-5\nmax_norm = 2.0\n")
    b.write_text("[trainer.optim]\nlr = 2e-5\n")
    cfg = rl(["@", str(a), "@", str(b)])
    assert (cfg.trainer.optim.lr, cfg.trainer.optim.max_norm) == (2e-5, 2.0)
    assert rl(["@", str(a), "@", str(b), "--trainer.optim.lr", "3e-5"]).trainer.optim.lr == 3e-5
    assert rl([]).trainer.optim.lr == 1e-6


def test_section_file(fake_plugins, tmp_path):
    sect = tmp_path / "optim.toml"
    sect.write_text("lr = 4e-5\n")
    root = tmp_path / "root.toml"
    root.write_text("[trainer.optim]\nlr = 1e-5\nmax_norm = 3.0\n")
    cfg = rl(["@", str(root), "--trainer.optim", "@", str(sect)])
    assert (cfg.trainer.optim.lr, cfg.trainer.optim.max_norm) == (4e-5, 3.0)
    assert rl(["--trainer.optim", f"@{sect}"]).trainer.optim.lr == 4e-5


def test_yaml_and_json_files(fake_plugins, tmp_path):
    y, j = tmp_path / "c.yaml", tmp_path / "c.json"
    y.write_text("trainer:\n  optim:\n    lr: 5.0e-6\n")
    j.write_text(json.dumps({"orchestrator": {"batch_size": 32}}))
    cfg = rl(["@", str(y), "@", str(j)])
    assert cfg.trainer.optim.lr == 5e-6 and cfg.orchestrator.batch_size == 32


def test_shared_fields_fill_components(fake_plugins):
    cfg = rl(["--model.name", "m1", "--max-steps", "7", "--seq-len", "512"])
    assert cfg.trainer.model.name == cfg.orchestrator.model.name == cfg.inference.model.name == "m1"
    assert cfg.trainer.max_steps == cfg.orchestrator.max_steps == 7
    assert cfg.trainer.model.seq_len == cfg.orchestrator.seq_len == 512
    # equal explicit values are accepted (a dumped config loads back)
    assert rl(["--seq-len", "512", "--trainer.model.seq-len", "512"]).orchestrator.seq_len == 512
    # the server processes images with the trainer's pixel bounds
    vlm = rl(["--model.vlm.max-pixels", "4096"])
    assert vlm.inference.model.vlm.max_pixels == vlm.trainer.model.vlm.max_pixels == 4096


def test_rollout_transport_reaches_trainer_and_orchestrator(fake_plugins):
    cfg = rl(["--rollout-transport.type", "zmq", "--rollout-transport.port", "6001"])
    for side in (cfg.trainer, cfg.orchestrator):
        assert (side.rollout_transport.type, side.rollout_transport.port) == ("zmq", 6001)
    with pytest.raises(ConfigError, match="rollout_transport.type='zmq' vs trainer.rollout_transport.type"):
        rl(["--rollout-transport.type", "zmq", "--trainer.rollout-transport.type", "filesystem"])


def test_output_dir_env(monkeypatch, fake_plugins):
    monkeypatch.setenv("PRL_OUTPUT_DIR", "/tmp/prl-out-test")
    assert rl([]).output_dir == Path("/tmp/prl-out-test")


def test_group_used_as_value_and_leftover_tokens(fake_plugins):
    with pytest.raises(ConfigError, match="is a config group, not a leaf field"):
        rl(["--trainer.optim", "3"])
    with pytest.raises(ConfigError, match="Unrecognized arguments: stray"):
        rl(["stray"])


def test_missing_plugin_names_providing_distribution(fake_plugins, monkeypatch):
    from prl import known_plugins

    catalogue = {("losses", "shiny"): ("prl-loss-shiny", "algorithms/loss-shiny")}
    monkeypatch.setattr(known_plugins, "providers", lambda: catalogue)
    with pytest.raises(ConfigError, match="install the distribution 'prl-loss-shiny'"):
        rl(["--trainer.loss.type", "shiny"])


def test_help_lists_installed_variants(fake_plugins):
    def helps(*argv: str) -> str:
        result = CliRunner().invoke(app, ["rl", *argv, "--plain"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert "usage: prl rl [-h] [@ FILE] [OPTIONS]" in result.output
        return result.output

    out = helps("--help", "trainer")
    assert "trainer.loss variant: FakeLoss" in out and "trainer.loss variant: OtherFakeLoss" in out
    assert "--trainer.loss.eps" in out and "A positive knob." in out
    assert "orchestrator.train.source[*]" in helps("--help", "orchestrator")
    out = helps("--help", "ckpt")
    assert "ckpt: Checkpointing, shared by trainer and orchestrator (optional). (optional, default: None)" in out
