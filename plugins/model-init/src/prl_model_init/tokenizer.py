"""A byte-level tokenizer with ChatML special tokens, built offline with ``tokenizers``.

Layout of the vocabulary (``VOCAB_SIZE`` = 320, a multiple of 64 so kernels that tile the
embedding matrix, vLLM's included, need no padding):

* ids 0..255 are the 256 byte values, id == byte. Every UTF-8 string encodes losslessly,
  one token per byte, so there is no unknown token and decoding is exact.
* ids 256.. are the special tokens of a Qwen3-style chat format (``SPECIAL_TOKENS``):
  turn markers, end of text, a dedicated pad, and the reasoning / tool tags. The tags are
  single tokens so a renderer can find turn and block boundaries by id.
* the rest up to ``VOCAB_SIZE`` are ``<|reserved_N|>`` so every id the model can sample
  decodes to something defined.

Bytes are stored under the usual byte-to-printable-character mapping of byte-level BPE
(printable ASCII and Latin-1 map to themselves, the other bytes to code points from 256
up) because that is what the ``ByteLevel`` pre-tokenizer and decoder expect. The BPE model
has no merges, so the tokenizer never combines bytes.
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

VOCAB_SIZE = 320

# (token, special): "special" tokens are dropped by decode(skip_special_tokens=True); the
# reasoning and tool tags are not special so parsed text keeps them, as in Qwen3.
SPECIAL_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|pad|>", True),
    ("<think>", False),
    ("</think>", False),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
]

# The vision markers of Qwen3-VL / Qwen3.5, taken from the reserved range by the ``-vl``
# presets only (ids 266..269), so the text presets' tokenizer files stay as they were. An
# image is ``<|vision_start|>`` + one ``<|image_pad|>`` per merged patch + ``<|vision_end|>``.
VISION_TOKENS: list[tuple[str, bool]] = [
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
]


def byte_alphabet() -> list[str]:
    """The printable character standing for each byte value 0..255, indexed by byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def build_tokenizer(vision: bool = False) -> Tokenizer:
    """The raw ``tokenizers.Tokenizer``: bytes at ids 0..255, then specials (and, with
    ``vision``, the vision markers), then reserved."""
    vocab = {ch: i for i, ch in enumerate(byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    # No regex split: with no merges, word boundaries cannot change the result.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    specials = SPECIAL_TOKENS + (VISION_TOKENS if vision else [])
    added = [AddedToken(t, special=s, normalized=False) for t, s in specials]
    n_reserved = VOCAB_SIZE - 256 - len(added)
    added += [AddedToken(f"<|reserved_{i}|>", special=True, normalized=False) for i in range(n_reserved)]
    tok.add_tokens(added)
    if tok.get_vocab_size() != VOCAB_SIZE:  # pragma: no cover - guards the layout above
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} ids, expected {VOCAB_SIZE}")
    return tok


_TOOLS_PREAMBLE = (
    "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>"
)
_TOOLS_CLOSING = (
    "\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>'
)

# Qwen3-style ChatML. Every literal is emitted through {{ }} and every tag strips the
# whitespace around it, so the only text produced is what the expressions say. Behaviour:
# a leading system message (and the tool list, when tools are given) opens the prompt;
# tool results are grouped into one user turn of <tool_response> blocks; an assistant turn
# after the last real user query keeps its reasoning as <think>...</think> (the final turn
# always gets the block, possibly empty), earlier turns drop it; the generation prompt opens
# an assistant turn and, with enable_thinking=false, pre-fills an empty think block.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(last_query=-1) -%}"
    "{%- for m in messages -%}"
    "{%- set c = m.content if m.content is string else '' -%}"
    "{%- set wrapped = c.strip().startswith('<tool_response>') and c.strip().endswith('</tool_response>') -%}"
    "{%- if m.role == 'user' and not wrapped -%}"
    "{%- set ns.last_query = loop.index0 -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if ns.last_query < 0 -%}{%- set ns.last_query = messages | length - 1 -%}{%- endif -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages[0].role == 'system' and messages[0].content -%}{{- messages[0].content + '\\n\\n' -}}"
    "{%- elif messages[0].role == 'system' -%}{{- '\\n\\n' -}}{%- endif -%}"
    "{{- '" + _TOOLS_PREAMBLE + "' -}}"
    "{%- for t in tools -%}{{- '\\n' + (t | tojson) -}}{%- endfor -%}"
    "{{- '" + _TOOLS_CLOSING + "<|im_end|>\\n' -}}"
    "{%- elif messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + (messages[0].content if messages[0].content is string else '') + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- set c = m.content if m.content is string else '' -%}"
    "{%- if m.role == 'system' and not loop.first -%}"
    "{{- '<|im_start|>system\\n' + c + '<|im_end|>\\n' -}}"
    "{%- elif m.role == 'user' -%}"
    "{{- '<|im_start|>user\\n' + c + '<|im_end|>\\n' -}}"
    "{%- elif m.role == 'assistant' -%}"
    "{%- set r = namespace(text='', body=c) -%}"
    "{%- if m.reasoning_content is string -%}{%- set r.text = m.reasoning_content -%}"
    "{%- elif '</think>' in c -%}"
    "{%- set r.text = c.split('</think>')[0].split('<think>')[-1].lstrip('\\n').rstrip('\\n') -%}"
    "{%- set r.body = c.split('</think>')[1:] | join('</think>') -%}"
    "{%- set r.body = r.body.lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if loop.index0 > ns.last_query and (loop.last or r.text) -%}"
    "{{- '<think>\\n' + r.text.strip('\\n') + '\\n</think>\\n\\n' + r.body.lstrip('\\n') -}}"
    "{%- else -%}{{- r.body -}}{%- endif -%}"
    "{%- for tc in (m.tool_calls or []) -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    "{%- if not loop.first or r.body -%}{{- '\\n' -}}{%- endif -%}"
    '{{- \'<tool_call>\\n{"name": "\' + f.name + \'", "arguments": \' -}}'
    "{%- if f.arguments is string -%}{{- f.arguments -}}{%- else -%}{{- f.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + c + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


# The vision-language template: the text one, with a message's content allowed to be a list
# of OpenAI-style parts. A text part contributes its text; an image part (``image``,
# ``image_url``) one ``<|vision_start|><|image_pad|><|vision_end|>`` that the processor
# widens to the image's patch count. A plain string content renders exactly as before.
_CONTENT_MACRO = (
    "{%- macro content(c) -%}"
    "{%- if c is string -%}{{- c -}}"
    "{%- elif c is iterable -%}{%- for p in c -%}"
    "{%- if p.type == 'text' -%}{{- p.text -}}"
    "{%- elif p.type in ['image', 'image_url'] -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)
VL_CHAT_TEMPLATE = _CONTENT_MACRO + CHAT_TEMPLATE.replace(
    "m.content if m.content is string else ''", "content(m.content)"
).replace("(messages[0].content if messages[0].content is string else '')", "content(messages[0].content)")
