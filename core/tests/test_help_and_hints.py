"""``--help`` one section at a time at the terminal's width, and the hints a new user gets
for the usual first mistakes (a file without @, --config, --lr, an RL file given to sft,
a typo inside a file), plus ``prl -h`` and ``prl --version``."""

from __future__ import annotations

import re
from collections import Counter
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

BROKEN = ("unless  says", "; )", "(optional; )", ":  (")


def run(*argv: str, columns: int = 80, **env: str):
    return CliRunner().invoke(app, list(argv), env={"COLUMNS": str(columns), **env})


def panels(out: str) -> list[tuple[str, list[str]]]:
    """(title, flags) of each boxed panel: a row starts right after the left border."""
    found: list[tuple[str, list[str]]] = []
    for line in out.splitlines():
        if line.startswith("╭"):
            found.append((line.strip("╭╮─ "), []))
        elif found and (m := re.match(r"│ (--[\w.\-\[\]*]+)", line)):
            found[-1][1].append(m.group(1))
    return found


def check_page(out: str, width: int = 80) -> list[tuple[str, list[str]]]:
    """Fits the width, no broken text, no empty or repeated panel title, and no flag twice
    (a flag shared by the variants of one union is listed once per variant)."""
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width
    for broken in BROKEN:
        assert broken not in out
    found = panels(out)
    titles = [t for t, _ in found]
    assert all(t and not t.startswith(":") for t in titles), titles
    assert not [t for t, n in Counter(titles).items() if n > 1]
    plain = Counter(f for t, flags in found if " variant: " not in t for f in flags)
    assert not [f for f, n in plain.items() if n > 1]
    for title, flags in found:
        assert len(flags) == len(set(flags)), title
    return found


@pytest.mark.parametrize(("command", "bound"), [("rl", 100), ("sft", 100), ("eval", 100)])
def test_top_level_help_is_short_and_fits_80_columns(fake_plugins, command, bound):
    result = run(command, "--help")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith(f"usage: prl {command} [-h] [@ FILE] [OPTIONS]")
    assert len(out.splitlines()) < bound
    titles = [t for t, _ in check_page(out)]
    assert titles[:2] == ["options", "sections"]
    assert f"prl {command} --help <section>" in " ".join(out.split())


def test_section_help_shows_that_section_only(fake_plugins):
    result = run("rl", "--help", "orchestrator")
    assert result.exit_code == 0, result.output
    check_page(result.output)
    flags = [f for _, fl in panels(result.output) for f in fl]
    assert "--orchestrator.batch-size" in flags
    assert all(f.startswith("--orchestrator.") for f in flags)
    # the same page whichever side of --help the section is on, and in kebab-case
    assert run("rl", "orchestrator", "--help").output == result.output
    sub = run("rl", "--help", "orchestrator.train.sampling").output
    assert "--orchestrator.train.sampling.temperature" in sub and "--orchestrator.batch-size" not in sub


def test_every_section_lists_each_panel_once(fake_plugins):
    """The renderer family sits under several paths: with --help all it is still one set of
    panels, the other paths pointing to it."""
    result = run("rl", "--help", "all", columns=120)
    assert result.exit_code == 0
    found = check_page(result.output, 120)
    assert len(result.output.splitlines()) < 1875
    assert "trainer.loss variant: FakeLoss" in [t for t, _ in found]


def test_eval_taskset_next_to_help_is_no_section(fake_plugins):
    result = run("eval", "--help", "fake-tasks")
    assert result.exit_code == 0
    assert [t for t, _ in panels(result.output)] == ["options", "sections"]


def test_unknown_section_is_a_usage_error(fake_plugins):
    result = run("rl", "--help", "orchestrater")
    assert result.exit_code == 2
    assert "no section 'orchestrater'; did you mean orchestrator?" in result.output


@pytest.mark.parametrize(("argv", "env"), [(["--plain", "--no-wide"], {}), ([], {"PYDANTIC_CONFIG_PLAIN": "1"})])
def test_plain_help_has_no_boxes_and_fits(fake_plugins, argv, env):
    result = run("rl", "--help", "trainer", *argv, **env)
    assert result.exit_code == 0
    assert "╭" not in result.output and "│" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert "--trainer.loss.eps" in result.output


def test_no_wide_puts_descriptions_under_flags(fake_plugins):
    wide = run("rl", "--help", "trainer.optim", columns=160).output
    narrow = run("rl", "--help", "trainer.optim", "--no-wide", columns=160).output
    side_by_side = r"│ --trainer\.optim\.lr +FLOAT +[A-Z]"
    assert re.search(side_by_side, wide) and not re.search(side_by_side, narrow)
    assert re.search(r"│ --trainer\.optim\.lr FLOAT +│", narrow)
    assert run("rl", "--help", "trainer.optim", columns=160, PYDANTIC_CONFIG_WIDE="0").output == narrow


def test_docstrings_keep_their_brackets(fake_plugins):
    out = run("rl", "--help", "model", "--plain", columns=200).output
    assert "(optional; [model.lora])" in out


def one_error(result, expected: str) -> None:
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert expected in result.output, result.output


def test_config_file_without_at(fake_plugins):
    expected = "prl rl: config files are passed with @: prl rl @ my-rl.toml"
    one_error(run("rl", "my-rl.toml"), expected)
    one_error(run("rl", "--config", "my-rl.toml"), expected)
    one_error(run("rl", "--config=my-rl.toml"), expected)


def test_unknown_flag_suggests_the_option_it_ends(fake_plugins):
    one_error(run("rl", "--lr", "1e-4"), "--lr: Unknown field — did you mean --trainer.optim.lr?")
    one_error(run("rl", "--trainer.lr", "1e-4"), "did you mean --trainer.optim.lr?")


def test_config_for_the_other_run_command(fake_plugins, tmp_path):
    rl_file, sft_file = tmp_path / "rl.toml", tmp_path / "sft.toml"
    rl_file.write_text("max_steps = 2\n[orchestrator]\nbatch_size = 8\n")
    sft_file.write_text("[data]\nname = 'x'\n")
    result = run("sft", "@", str(rl_file))
    one_error(
        result, f"prl sft: {rl_file} looks like a `prl rl` config (it has [orchestrator]); run prl rl @ {rl_file}"
    )
    assert "Unknown field" not in result.output
    one_error(run("rl", "@", str(sft_file)), f"looks like a `prl sft` config (it has [data]); run prl sft @ {sft_file}")


def test_error_in_a_file_names_its_line(fake_plugins, tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("max_steps = 2\n\n[trainer.model]\nname = 'a'\n\n[trainer.optim]\n# the typo\nlrr = 1e-4\n")
    one_error(
        run("rl", "@", str(path)), f"{path}:8: --trainer.optim.lrr: Unknown field — did you mean --trainer.optim.lr?"
    )
    # the same typo as a flag is no file's
    result = run("rl", "--trainer.optim.lrr", "1")
    one_error(result, "\n--trainer.optim.lrr: Unknown field")


def test_missing_field_names_the_table_lacking_it(fake_plugins, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[[orchestrator.train.source]]\nname = 'a'\n\n[[orchestrator.train.source]]\nname = 'b'\n")
    result = run("rl", "@", str(path))
    one_error(result, f"{path}:4: --orchestrator.train.source[1].env: Field required")
    one_error(result, f"{path}:1: --orchestrator.train.source[0].env: Field required")


def test_section_file_error_names_its_line(fake_plugins, tmp_path):
    path = tmp_path / "orch.toml"
    path.write_text("batch_size = 8\n[train]\ngroup_sise = 2\n")
    one_error(run("rl", "--orchestrator", "@", str(path)), f"{path}:3: --orchestrator.train.group-sise")


def test_typo_in_a_shared_section_is_reported_once(fake_plugins, tmp_path):
    path = tmp_path / "w.toml"
    path.write_text("[monitors.wandb]\nprojct = 'x'\n")
    result = run("rl", "@", str(path))
    one_error(result, f"{path}:2: --monitors.wandb.projct: Unknown field — did you mean --monitors.wandb.project?")
    assert "1 validation error for RLConfig" in result.output
    assert result.output.count("projct") == 1
    # a bad shared value is copied into trainer and orchestrator too: said once
    result = run("rl", "--seq-len", "abc")
    one_error(result, "1 validation error for RLConfig\n--seq-len: Input should be a valid integer")
    assert result.output.count("abc") == 1


def test_prl_short_help_and_version():
    result = run("-h")
    assert result.exit_code == 0 and "rl" in result.output and "Usage: prl" in result.output
    result = run("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"prl {version('prl-core')}"


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("y.yaml", "max_steps: 2\ntrainer:\n  optim:\n    lrr: 0.1\n", 4),
        ("j.json", '{\n  "trainer": {\n    "optim": {"lrr": 1}\n  }\n}\n', 3),
        ("d.toml", "[trainer]\nseed = 1\noptim.lrr = 1\n", 3),
    ],
)
def test_error_line_in_yaml_json_and_dotted_toml(fake_plugins, tmp_path, name, text, line):
    path = tmp_path / name
    path.write_text(text)
    one_error(run("rl", "@", str(path)), f"{path}:{line}: --trainer.optim.lrr: Unknown field")
