"""Group-level eval knobs (``select``, ``num_examples``, ``group_size``, ``sampling``) are the
default of every eval source, under ``prl rl`` ([orchestrator.eval]) and ``prl sft``
([eval]); a source's own value wins. The dry run's resolved configs show what each source
really uses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from prl.testing.configs import tiny_rl_toml, write_toml

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")
pytest.importorskip("prl_inference_torch")

TASKSET = {"taskset": {"id": "reverse-text"}}


def _group(**extra):
    """Group defaults and two sources: ``a`` sets nothing, ``b`` overrides some of each."""
    return {
        "interval": 1,
        "num_examples": 4,
        "group_size": 2,
        "select": {"shuffle": True, "skip": 1},
        "sampling": {"temperature": 0.5, "max_completion_tokens": 8},
        "source": [
            {"name": "a", "env": TASKSET},
            {
                "name": "b",
                "env": TASKSET,
                "group_size": 3,
                "select": {"skip": 0, "limit": 2},
                "sampling": {"temperature": 1.0},
            },
        ],
        **extra,
    }


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from prl_model_init.build import make_model

    return make_model(tmp_path_factory.mktemp("model") / "tiny", preset="tiny")


def _prl(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "prl", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _effective(resolved, name: str) -> tuple:
    source = json.loads((resolved / "envs" / "eval" / f"{name}.json").read_text())
    sampling = {k: v for k, v in source["sampling"].items() if v is not None}
    select = {k: source["select"][k] for k in ("limit", "shuffle", "skip")}
    return source["group_size"], select, sampling


def _assert_effective(resolved):
    assert _effective(resolved, "a") == (
        2,
        {"limit": 4, "shuffle": True, "skip": 1},
        {"temperature": 0.5, "max_completion_tokens": 8},
    )
    # b's own values win; what b left unset comes from the group.
    assert _effective(resolved, "b") == (
        3,
        {"limit": 2, "shuffle": True, "skip": 0},
        {"temperature": 1.0, "max_completion_tokens": 8},
    )


def test_rl_eval_sources_take_the_group_defaults_they_leave_unset(tmp_path, model):
    toml = tiny_rl_toml(tmp_path, model, {"orchestrator": {"eval": _group()}})
    proc = _prl("rl", "@", str(toml), "--run.name", "d", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    resolved = tmp_path / "outputs" / "d" / "configs" / "attempt_1" / "resolved"
    _assert_effective(resolved)
    # The orchestrator reads the same effective values from its own resolved config.
    orch = json.loads((resolved / "orchestrator.json").read_text())
    assert [s["select"]["limit"] for s in orch["eval"]["source"]] == [4, 2]


def test_sft_eval_sources_take_the_group_defaults_they_leave_unset(tmp_path, model):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": [{"role": "user", "content": "ab"}], "completion": "ba"}) + "\n")
    config = {
        "max_steps": 1,
        "output_dir": str(tmp_path / "outputs"),
        "model": {"name": str(model)},
        "data": {"name": str(data), "seq_len": 64, "batch_size": 1},
        "inference": {"server": {"port": 0}},
        "eval": _group(),
    }
    toml = write_toml(tmp_path / "sft.toml", config)
    proc = _prl("sft", "@", str(toml), "--run.name", "d", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    _assert_effective(tmp_path / "outputs" / "d" / "configs" / "attempt_1" / "resolved")


def test_an_unknown_key_in_the_group_select_is_a_did_you_mean_usage_error(tmp_path, model):
    group = _group(select={"shuffle": True, "skp": 1})
    toml = tiny_rl_toml(tmp_path, model, {"orchestrator": {"eval": group}})
    proc = _prl("rl", "@", str(toml), "--run.name", "d", "--dry-run")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "--orchestrator.eval.select.skp: Unknown field — did you mean --orchestrator.eval.select.skip?" in (
        proc.stderr
    )
    assert not (tmp_path / "outputs" / "d").exists()
