from __future__ import annotations

import typer
from prl_model_init import active_parameters, count_parameters
from prl_model_init.plugin import prl_add_commands
from typer.testing import CliRunner


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """prl"""

    prl_add_commands(app=app)
    return app


def test_model_init_writes_a_model(tmp_path):
    out = tmp_path / "models" / "tiny"
    res = CliRunner().invoke(_app(), ["model", "init", "--preset", "tiny", "--out", str(out), "--seed", "3"])
    assert res.exit_code == 0, res.output
    assert f"{count_parameters('tiny'):,} parameters" in res.output
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()


def test_model_init_tiny_moe_says_its_active_parameters(tmp_path):
    out = tmp_path / "moe"
    res = CliRunner().invoke(_app(), ["model", "init", "--preset", "tiny-moe", "--out", str(out)])
    assert res.exit_code == 0, res.output
    total, active = count_parameters("tiny-moe"), active_parameters("tiny-moe")
    assert f"({total:,} parameters, {active:,} active per token, seed 0)" in res.output


def test_bad_flags_exit_2_with_one_line(tmp_path):
    runner = CliRunner()
    res = runner.invoke(_app(), ["model", "init", "--preset", "huge", "--out", str(tmp_path / "m")])
    assert res.exit_code == 2
    presets = "tiny, small, tiny-moe, tiny-qwen3.5, tiny-qwen3.5-vl, qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b"
    assert res.output.strip() == f"error: --preset must be one of {presets} (got 'huge')"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    res = runner.invoke(_app(), ["model", "init", "--out", str(tmp_path / "full")])
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1 and "--force" in res.output
    res = runner.invoke(_app(), ["model", "init", "--out", str(tmp_path / "full"), "--force"])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "full" / "x").exists()


def test_plugin_is_registered_through_entry_point():
    from prl.plugins import get_registry

    assert "prl-model-init" in {p.dist for p in get_registry().plugins.values()}


def test_prl_cli_runs_model_init(tmp_path):
    """Through the installed ``prl`` command, which adds plugin commands via the hook."""
    import subprocess
    import sys
    from pathlib import Path

    prl = Path(sys.executable).parent / "prl"
    out = tmp_path / "m"
    res = subprocess.run(
        [str(prl), "model", "init", "--preset", "tiny", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "wrote tiny model" in res.stdout and (out / "config.json").exists()
    assert "Writing model shards" not in res.stderr
