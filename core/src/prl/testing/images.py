"""Images for tests: a solid-colour PNG as the base64 ``data:`` URL an image part carries
(the form rollouts, the token route and the chat route all take)."""

from __future__ import annotations

import base64
import io


def png_url(colour: str = "red", side: int = 64) -> str:
    """A ``side`` x ``side`` PNG of one ``colour`` (a PIL colour name) as a data: URL."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (side, side), colour).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
