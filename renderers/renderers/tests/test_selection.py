"""Selecting renderers by name: registry, configs, auto, custom, and their errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from prl_renderers import RendererError
from pydantic import TypeAdapter, ValidationError

from prl.config.unions import PluginConfig
from prl.contracts import Renderer, RendererConfig
from prl.plugins import get_registry

USER = [{"role": "user", "content": "abc"}]


def config(data: dict):
    return TypeAdapter(PluginConfig["renderers"]).validate_python(data)


def test_every_family_has_one_class_and_a_config():
    classes = get_registry().classes("renderers")
    for name in ("auto", "default", "custom", "qwen3", "qwen3.5", "llama-3", "gpt-oss", "deepseek-r1", "glm-4.5"):
        assert name in classes
    for name, cls in classes.items():
        assert issubclass(cls, Renderer) and cls.name == name
        assert issubclass(cls.Config, RendererConfig)
        assert cls.Config.model_fields["name"].default == name
        assert all(f.description for f in cls.Config.model_fields.values()), name
    assert get_registry().origin("renderers", "default") == "prl-renderers"
    assert classes["default"].__module__ == "prl_renderers.default"


def test_config_union_validates_family_fields():
    cfg = config({"name": "qwen3", "enable_thinking": False})
    assert cfg.enable_thinking is False and type(cfg).__name__ == "Qwen3RendererConfig"
    assert config({}).name == "auto"
    with pytest.raises(ValidationError, match="enable_thinkin"):
        config({"name": "qwen3", "enable_thinkin": False})
    # the package's cross-field checks run at load time
    with pytest.raises(ValidationError, match="preserve_thinking=True implies thinking_retention='all'"):
        config({"name": "qwen3.6", "preserve_thinking": True, "thinking_retention": "tool_cycle"})
    cfg = config({"name": "llama-3", "date_string": "01 Jan 2026"})
    assert cfg.date_string == "01 Jan 2026" and cfg.tools_in_user_message is True


def test_auto_maps_hub_names_and_rejects_unmapped(tiny_dir, tmp_path, make, unmarked_copy):
    named = unmarked_copy(tiny_dir, tmp_path / "hub" / "Qwen" / "Qwen3-8B")
    assert make("auto", named).resolved == "qwen3"
    cache = unmarked_copy(tiny_dir, tmp_path / "models--meta-llama--Llama-3.2-1B-Instruct" / "snapshots" / "abc")
    from prl_renderers.auto import resolve_name

    assert resolve_name(str(cache)) == "llama-3"
    plain = unmarked_copy(tiny_dir, tmp_path / "mine" / "tiny-ft")
    with pytest.raises(RendererError) as err:
        make("auto", plain)
    msg = str(err.value)
    assert "\n" not in msg and "no renderer is mapped for model" in msg and "tiny-ft" in msg


def test_family_that_does_not_fit_the_tokenizer_is_one_line(tiny_dir, make):
    with pytest.raises(RendererError) as err:
        make("llama-3", tiny_dir)
    assert "\n" not in str(err.value) and "renderer 'llama-3' does not fit tokenizer" in str(err.value)


CUSTOM = '''
from typing import ClassVar, Literal
from prl.contracts import RendererConfig
from prl_renderers.default import DefaultRenderer


class ShoutConfig(RendererConfig):
    name: Literal["shout"] = "shout"
    """Tag of this config."""
    loud: bool = False
    """Upper-case user messages before rendering."""


class Shout(DefaultRenderer):
    config_class: ClassVar = ShoutConfig

    def __init__(self, config, tokenizer):
        self.loud = config.loud
        super().__init__(DefaultRenderer.Config(), tokenizer)

    def render(self, messages, tools=None, add_generation_prompt=False):
        if self.loud:
            messages = [{**m, "content": m["content"].upper()} if m["role"] == "user" else m for m in messages]
        return super().render(messages, tools, add_generation_prompt)
'''


def test_custom_from_relative_file_and_dotted_path(tiny_dir, tmp_path, monkeypatch, make):
    (tmp_path / "shout.py").write_text(textwrap.dedent(CUSTOM))
    monkeypatch.chdir(tmp_path)
    cfg = config({"name": "custom", "import_path": "shout.py:Shout", "loud": True})
    assert cfg.import_path == f"{tmp_path / 'shout.py'}:Shout"  # works from any directory later
    monkeypatch.chdir("/")
    cls = get_registry().get("renderers", "custom")
    r = cls(cfg, str(tiny_dir))
    out = r.render(USER, add_generation_prompt=True)
    assert r.tokenizer.decode([t for t, m in zip(out.token_ids, out.message_index, strict=False) if m == 0]) == "ABC"
    dotted = make("custom", tiny_dir, import_path="prl_renderers.families.Qwen3Renderer", enable_thinking=False)
    assert dotted.render_ids(USER, add_generation_prompt=True) == make(
        "qwen3", tiny_dir, enable_thinking=False
    ).render_ids(USER, add_generation_prompt=True)


@pytest.mark.parametrize(
    "path,expected",
    [
        ("nope.mod.Renderer", "module 'nope' not found"),
        ("missing_file.py:Renderer", "does not exist"),
        ("prl_renderers.default.Nope", "has no attribute 'Nope'"),
        ("prl_renderers.default.TEMPLATE_ROLE", "not a class"),
        ("json.JSONDecoder", "must set config_class"),
    ],
)
def test_bad_import_path_is_one_line(path, expected):
    with pytest.raises(ValidationError) as err:
        config({"name": "custom", "import_path": path})
    (error,) = err.value.errors()
    assert expected in error["msg"] and "\n" not in error["msg"]


def test_custom_keys_are_validated_against_its_config(tmp_path):
    (tmp_path / "shout.py").write_text(textwrap.dedent(CUSTOM))
    with pytest.raises(ValidationError, match="loudd"):
        config({"name": "custom", "import_path": f"{tmp_path}/shout.py:Shout", "loudd": True})


def test_rendering_does_not_import_torch(tiny_dir):
    """The orchestrator renders prompts and must stay torch-free."""
    code = textwrap.dedent(f"""
        import sys
        from prl.plugins import get_registry
        cls = get_registry().get("renderers", "auto")
        r = cls(cls.Config(), {str(tiny_dir)!r})
        ids = r.render_ids([{{"role": "user", "content": "abc"}}], add_generation_prompt=True)
        r.parse_response([97, 258])
        assert ids and "torch" not in sys.modules, "torch was imported"
    """)
    env = {**os.environ, "PRL_LOAD_PLUGINS": "renderers"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
