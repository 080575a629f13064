"""``prl eval <taskset> -n -r -m -c -s -o``: the single-source shortcuts resolve to the
same config a user would write by hand."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from prl.cli.main import app


def _resolved(out_dir) -> dict:
    (run,) = [p for p in out_dir.iterdir() if p.is_dir()]
    return json.loads((run / "configs" / "latest" / "resolved" / "eval.json").read_text())


def test_shortcuts_fill_one_source_and_the_run_settings(fake_plugins, tmp_path):
    argv = ["eval", "fake-tasks", "-n", "5", "-r", "3", "-m", "models/tiny", "-c", "4", "-s"]
    # models/tiny is not on this machine: the auto renderer could not map it, so name one
    argv += ["-o", str(tmp_path), "--env.taskset.size", "7", "--renderer.name", "default", "--dry-run"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    cfg = _resolved(tmp_path)
    assert cfg["num_examples"] == 5 and cfg["group_size"] == 3 and cfg["model"]["name"] == "models/tiny"
    assert cfg["concurrency"]["min_inflight"] == cfg["concurrency"]["max_inflight"] == 4
    (source,) = cfg["source"]
    assert source["name"] == "fake-tasks" and source["env"]["taskset"] == {"id": "fake-tasks", "size": 7, "split": None}
    assert source["select"]["shuffle"] is True


def test_c_without_a_value_is_a_one_line_usage_error(fake_plugins, tmp_path):
    result = CliRunner().invoke(app, ["eval", "fake-tasks", "-o", str(tmp_path), "-c"])
    assert result.exit_code == 2
    assert "-c requires a value" in result.output and "Traceback" not in result.output


def test_two_tasksets_are_refused(fake_plugins, tmp_path):
    result = CliRunner().invoke(app, ["eval", "fake-tasks", "other", "-o", str(tmp_path), "--dry-run"])
    assert result.exit_code == 2 and "Unrecognized arguments: other" in result.output
