"""Bounded fuzzing of an inference server's HTTP API, for backend test suites.

:func:`fuzz_openapi` reads the server's OpenAPI schema, and for each operation whose path
matches ``path_regex`` lets schemathesis generate ``max_examples`` schema-valid and as many
schema-invalid requests, then sends a few malformed bodies no schema describes (not JSON,
not UTF-8, not an object). Every reply must be below 500 and every 4xx must carry
``{"error": {"message": <non-empty>}}``; the first reply that is not raises
``AssertionError`` naming the request. Only use it against a loopback server you started.

schemathesis and hypothesis are imported inside the function, so importing this module
needs neither.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import httpx

MALFORMED_BODIES = [
    (b"{not json", "application/json"),
    (b"\xff\xfe\x00garbage", "application/json"),
    (b"[1, 2, 3]", "application/json"),
    (b'"a string"', "application/json"),
    (b"null", "application/json"),
    (b'{"n": "many"}', "application/json"),
    (b"prompt=hi", "application/x-www-form-urlencoded"),
]


def check_reply(what: str, status: int, body: Any) -> None:
    """No 5xx; a 4xx says what was wrong in ``error.message``."""
    assert status < 500, f"{what} -> {status}: {str(body)[:500]}"
    if status >= 400:
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        assert isinstance(message, str) and message, f"{what} -> {status} without an error message: {body!r:.300}"


def _json(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def fuzz_openapi(
    base_url: str, path_regex: str, max_examples: int = 20, headers: dict[str, str] | None = None
) -> Counter:
    """Fuzz the matching operations; returns a count of the status codes seen."""
    import schemathesis
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    seen: Counter = Counter()
    operations = [r.ok() for r in schema.get_all_operations() if re.search(path_regex, r.ok().path)]
    assert operations, f"no operation of {base_url}/openapi.json matches {path_regex!r}"
    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _generated(op, mode, base_url, headers, max_examples, seen)
        if op.method.upper() == "POST":
            _malformed(base_url, op.path, headers, seen)
    return seen


def _generated(
    op: Any, mode: Any, base_url: str, headers: dict[str, str] | None, max_examples: int, seen: Counter
) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable

    @given(case=op.as_strategy(generation_mode=mode))
    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case: Any) -> None:
        response = case.call(base_url=base_url, headers=headers, timeout=120)
        seen[response.status_code] += 1
        what = f"{case.method} {case.path} ({mode.value}) body={str(case.body)[:200]}"
        check_reply(what, response.status_code, _json(response))

    try:
        run()
    except Unsatisfiable:
        if mode.is_positive:
            raise  # an operation without inputs has no invalid requests: nothing to send


def _malformed(base_url: str, path: str, headers: dict[str, str] | None, seen: Counter) -> None:
    with httpx.Client(base_url=base_url, timeout=60) as http:
        for content, media_type in MALFORMED_BODIES:
            resp = http.post(path, content=content, headers={**(headers or {}), "content-type": media_type})
            seen[resp.status_code] += 1
            check_reply(f"POST {path} body={content!r}", resp.status_code, _json(resp))
