"""``default`` on a template that is not ChatML: attribution from prefixes alone."""

from __future__ import annotations

import json

TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'user' %}{{ '<|im_start|>USER: ' + m.content + '\\n' }}"
    "{% elif m.role == 'assistant' %}{{ 'BOT: ' + m.content + '<|endoftext|>' + '\\n\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'BOT: ' }}{% endif %}"
)


def test_default_attributes_an_unknown_template(tiny_dir, tmp_path, make, unmarked_copy):
    d = unmarked_copy(tiny_dir, tmp_path / "other")
    (d / "chat_template.jinja").write_text(TEMPLATE)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["eos_token"] = "<|endoftext|>"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    r = make("default", d)
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ih"},
        {"role": "user", "content": "yo"},
    ]
    out = r.render(msgs, add_generation_prompt=True)
    tok = r.tokenizer

    def owned(i):
        return tok.decode([t for t, m in zip(out.token_ids, out.message_index, strict=False) if m == i])

    assert tok.decode(out.token_ids) == "<|im_start|>USER: hi\nBOT: ih<|endoftext|>\n\n<|im_start|>USER: yo\nBOT: "
    assert owned(0) == "hi" and owned(2) == "yo"
    assert owned(1) == "ih<|endoftext|>"  # "BOT: " is the generation prompt, the separator is template
    assert owned(-1) == "<|im_start|>USER: \nBOT: \n\n<|im_start|>USER: \nBOT: "
    assert r.get_stop_token_ids() == [tok.convert_tokens_to_ids("<|endoftext|>")]
    assert r.parse_response(tok.encode("ok", add_special_tokens=False) + r.get_stop_token_ids())["content"] == "ok"
