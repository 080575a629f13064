"""prl.testing.configs: the tiny run's overrides merge like a second config file, and the
TOML written reads back as the same dict."""

from __future__ import annotations

import tomllib

from prl.testing.configs import REVERSE_TEXT, merge, tiny_rl_config, tiny_rl_toml, write_toml


def test_overrides_merge_table_by_table_and_none_removes_a_key():
    base = {"a": 1, "t": {"x": 1, "y": {"z": 2}}, "l": [1, 2], "gone": {"k": 1}}
    out = merge(base, {"t": {"y": {"w": 3}, "x": None}, "l": [9]}, {"gone": None, "a": 2})
    assert out == {"a": 2, "t": {"y": {"z": 2, "w": 3}}, "l": [9]}
    assert base == {"a": 1, "t": {"x": 1, "y": {"z": 2}}, "l": [1, 2], "gone": {"k": 1}}  # untouched


def test_a_digit_keyed_table_updates_one_source_of_the_list():
    cfg = tiny_rl_config(
        "m", "out", {"orchestrator": {"train": {"source": {"0": {"env": {"serve": {"isolate": True}}}}}}}
    )
    (source,) = cfg["orchestrator"]["train"]["source"]
    assert source == {"name": "reverse-text", "env": {"taskset": {"id": "reverse-text"}, "serve": {"isolate": True}}}
    assert REVERSE_TEXT["env"] == {"taskset": {"id": "reverse-text"}}  # the shared constant is not changed


def test_the_written_toml_reads_back_as_the_merged_config(tmp_path):
    lora = {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"], "name": "policy-lora"}
    overrides = {"model": {"lora": lora}, "ckpt": {}, "trainer": {"optim": None}, "run": {"name": 'a "b"\\c'}}
    toml = tiny_rl_toml(tmp_path, tmp_path / "model", overrides, {"orchestrator": {"eval": {"source": [REVERSE_TEXT]}}})
    data = tomllib.loads(toml.read_text())
    assert data == tiny_rl_config(
        tmp_path / "model", tmp_path / "outputs", overrides, {"orchestrator": {"eval": {"source": [REVERSE_TEXT]}}}
    )
    assert data["ckpt"] == {} and data["trainer"] == {} and data["max_steps"] == 2
    assert data["orchestrator"]["train"]["source"] == [REVERSE_TEXT] and data["model"]["lora"] == lora


def test_two_sources_and_inline_tables_round_trip(tmp_path):
    kuhn = {"name": "kuhn", "ratio": 1.0, "env": {"taskset": {"id": "kuhn-poker"}}, "algo": {"type": "debug"}}
    cfg = {"x": {"y": [{"a": 1}, {"b": {"c": [1, 2]}}]}, "env_vars": {"A B": "1"}, "s": [REVERSE_TEXT, kuhn]}
    assert tomllib.loads(write_toml(tmp_path / "c.toml", cfg).read_text()) == cfg
