"""`import prl` and a dry run never import torch (CPU-only orchestrator nodes install prl-core alone)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT)


def test_import_prl_is_torch_free():
    out = _run("""
        import sys, prl, prl.contracts, prl.config.roots, prl.plugins
        prl.plugins.get_registry().describe()
        heavy = [m for m in ("torch", "transformers", "vllm") if m in sys.modules]
        print("HEAVY", heavy)
    """)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


def test_rl_dry_run_is_torch_free(tmp_path):
    example = ROOT / "examples" / "reverse-text" / "rl.toml"
    # the model must exist before a dry run; only its directory is looked at, never loaded
    model = tmp_path / "model"
    model.mkdir()
    # the marker `prl model init` writes, which the default renderer `auto` checks at dry-run
    (model / "config.json").write_text('{"prl_renderer": "qwen3"}')
    out = _run(f"""
        import sys
        from prl.cli.main import main
        sys.argv = ["prl", "rl", "@", {str(example)!r}, "--output-dir", {str(tmp_path / "out")!r}, "--dry-run",
                    "--model.name", {str(model)!r}]
        try:
            main()
        except SystemExit as exc:
            print("EXIT", exc.code)
        heavy = [m for m in ("torch", "transformers", "vllm") if m in sys.modules]
        print("HEAVY", heavy)
    """)
    assert "EXIT 0" in out.stdout, out.stdout + out.stderr
    assert "HEAVY []" in out.stdout
