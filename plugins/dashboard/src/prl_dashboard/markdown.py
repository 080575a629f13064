"""A small Markdown to HTML renderer for run reports that escapes everything first.

Reports are written by people and agents, so their text is untrusted: every character is
HTML-escaped before any markup is added, raw HTML in a report shows as text, and links
keep only ``http``, ``https``, relative and ``#`` targets (no ``javascript:``). Supported:
ATX headings, paragraphs, fenced code, bullet and numbered lists, block quotes, horizontal
rules, pipe tables, inline code, bold, italic, links and ``[^id]`` footnote references.
"""

from __future__ import annotations

import html
import re

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITALIC = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_FOOTREF = re.compile(r"\[\^([\w-]+)\]")


def _link(match: re.Match[str]) -> str:
    text, url = match.group(1), html.unescape(match.group(2))
    scheme = url.split("/", 1)[0]
    if ":" in scheme and not re.fullmatch(r"https?:", scheme, re.I):
        return text  # javascript:, data: and the like stay plain text
    return f'<a href="{html.escape(url, quote=True)}" rel="noopener">{text}</a>'


def inline(text: str) -> str:
    """Escaped ``text`` with inline markup; code spans are protected from the other rules."""
    parts = _CODE.split(html.escape(text, quote=False))
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{part}</code>")
            continue
        part = _LINK.sub(_link, part)
        part = _FOOTREF.sub(r'<sup class="fn">[\1]</sup>', part)
        part = _BOLD.sub(r"<strong>\1</strong>", part)
        out.append(_ITALIC.sub(r"<em>\1</em>", part))
    return "".join(out)


def _table(lines: list[str]) -> str:
    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    head = "".join(f"<th>{inline(c)}</th>" for c in cells(lines[0]))
    body = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in cells(ln)) + "</tr>" for ln in lines[2:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _is_table(lines: list[str], i: int) -> bool:
    return i + 1 < len(lines) and "|" in lines[i] and re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", lines[i + 1]) is not None


def render(text: str) -> str:
    """HTML for the Markdown ``text`` (see module docstring for what is understood)."""
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1 : j]), quote=False) + "</code></pre>")
            i = j + 1
        elif m := re.match(r"(#{1,6})\s+(.*)", line):
            level = len(m.group(1))
            out.append(f"<h{level}>{inline(m.group(2).strip())}</h{level}>")
            i += 1
        elif re.fullmatch(r"\s*([-*_])(\s*\1){2,}\s*", line):
            out.append("<hr>")
            i += 1
        elif _is_table(lines, i):
            j = i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                j += 1
            out.append(_table(lines[i:j]))
            i = j
        elif re.match(r"\s*([-*+]|\d+[.)])\s+", line):
            i = _list(lines, i, out)
        elif line.startswith(">"):
            j = i
            while j < len(lines) and lines[j].startswith(">"):
                j += 1
            quoted = "\n".join(ln[1:].lstrip() for ln in lines[i:j])
            out.append(f"<blockquote>{render(quoted)}</blockquote>")
            i = j
        elif not line.strip():
            i += 1
        else:
            j = i
            while (
                j < len(lines) and lines[j].strip() and not re.match(r"(#{1,6}\s|```|>|\s*([-*+]|\d+[.)])\s)", lines[j])
            ):
                j += 1
            out.append("<p>" + inline(" ".join(ln.strip() for ln in lines[i:j])) + "</p>")
            i = j
    return "\n".join(out)


def _list(lines: list[str], i: int, out: list[str]) -> int:
    ordered = bool(re.match(r"\s*\d+[.)]\s", lines[i]))
    tag = "ol" if ordered else "ul"
    items = []
    while i < len(lines) and (m := re.match(r"\s*(?:[-*+]|\d+[.)])\s+(.*)", lines[i])):
        items.append(f"<li>{inline(m.group(1))}</li>")
        i += 1
    out.append(f"<{tag}>{''.join(items)}</{tag}>")
    return i
