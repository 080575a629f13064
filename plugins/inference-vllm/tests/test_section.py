"""``[inference.vllm]``: the reference's pass-through of vLLM argument names (no server)."""

from __future__ import annotations

import pytest
from prl_inference_vllm.backend import parse_vllm_args
from prl_inference_vllm.config import vllm_argv
from prl_inference_vllm.section import known_vllm_args
from typer.testing import CliRunner

from prl.cli.main import app
from prl.config.errors import ConfigError
from prl.config.resolve import resolve
from prl.config.roots import RLConfig


def rl(argv: list[str]) -> RLConfig:
    return resolve(RLConfig, argv).config


def test_cli_values_are_json_coerced_and_forwarded(tmp_path):
    cfg = rl(
        [
            "--inference.vllm.max-num-seqs", "256",  # typed by prl: stays a number
            "--inference.vllm.compilation-config", '{"cudagraph_mode": "NONE"}',  # a dict
            "--inference.vllm.block_size", "32",  # untyped: still a number
            "--inference.vllm.kv-cache-dtype", "auto",  # not JSON: a string
            "--inference.vllm.enforce-eager",  # bare flag: true
        ]
    )  # fmt: skip
    backend = cfg.inference.backend
    assert backend.type == "vllm" and backend.max_num_seqs == 256 and backend.enforce_eager is True
    assert backend.extra_args == {
        "compilation_config": {"cudagraph_mode": "NONE"},
        "block_size": 32,
        "kv_cache_dtype": "auto",
    }
    argv = vllm_argv(cfg.inference)
    assert argv[argv.index("--compilation-config") + 1] == '{"cudagraph_mode": "NONE"}'
    assert argv[argv.index("--block-size") + 1] == "32" and argv[argv.index("--max-num-seqs") + 1] == "256"
    if known_vllm_args() is not None:  # vLLM's own parser accepts what was built
        args = parse_vllm_args(cfg.inference)
        assert args.max_num_seqs == 256 and args.block_size == 32


def test_toml_section_with_dashes_overrides_backend_and_prl_owned_names(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(
        '[model]\nname = "m"\n[inference.backend]\ntype = "vllm"\nmax_num_seqs = 8\n'
        '[inference.vllm]\nmax-num-seqs = 64\nmodel = "m"\nport = 9001\nmax_model_len = 512\n'
    )
    inf = rl(["@", str(f)]).inference
    assert inf.backend.max_num_seqs == 64  # the section overrides [inference.backend]
    assert (inf.model.name, inf.server.port, inf.max_model_len) == ("m", 9001, 512)


def test_model_in_section_conflicts_with_shared_model(tmp_path):
    with pytest.raises(ConfigError, match="Shared config conflicts"):
        rl(["--model.name", "a", "--inference.vllm.model", "b"])


@pytest.mark.skipif(known_vllm_args() is None, reason="vLLM's argument names cannot be read")
@pytest.mark.parametrize(
    "argv,message",
    [
        (["--inference.vllm.max-num-seq", "3"], "inference.vllm.max_num_seq is not a vLLM engine or server argument"),
        (["--inference.vllm.served-model-name", "x"], "inference.vllm.served_model_name cannot be set"),
        (["--inference.backend.type", "torch", "--inference.vllm.block-size", "8"], "selects the vllm backend"),
        (["--inference.vllm", "3"], "`--inference.vllm` expects a JSON dict"),
    ],
)
def test_bad_section_is_one_line_exit_2(argv, message, tmp_path):
    result = CliRunner().invoke(app, ["rl", *argv, "--output-dir", str(tmp_path), "--dry-run"])
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 2
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(known_vllm_args() is None, reason="vLLM's argument names cannot be read")
def test_known_names_come_from_engine_and_server_args():
    names = known_vllm_args()
    assert {"max_num_seqs", "compilation_config", "block_size", "enable_auto_tool_choice", "headless"} <= names
