"""The dashboard's OpenAPI document, served at ``/api/openapi.json``.

Written by hand (the server is the standard library's, with no framework to derive it) and
kept honest by schemathesis in ``tests/test_openapi.py``: every route, the query parameters
each reads, the 400/404 each can answer with its ``{"error": "<what>"}`` body, and the
content types of the static app.
"""

from __future__ import annotations

from typing import Any

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "minLength": 1}},
}
STATIC_TYPES = ("text/html", "text/javascript", "text/css", "image/svg+xml")


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json({"$ref": "#/components/schemas/Error"}, description)


NOT_FOUND = _error("No such run, file, episode or route")
BAD_QUERY = _error("A query parameter is missing or malformed")
RUN = {"name": "run", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}


def _query(name: str, description: str, required: bool = False, integer: bool = False) -> dict[str, Any]:
    schema = {"type": "integer", "minimum": 0} if integer else {"type": "string", "minLength": 1 if required else 0}
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


def _get(
    summary: str, body: dict[str, Any], params: list[dict[str, Any]] = (), bad_query: bool = False
) -> dict[str, Any]:
    responses = {"200": _json(body, summary), "404": NOT_FOUND}
    if bad_query:
        responses["400"] = BAD_QUERY
    return {"get": {"summary": summary, "parameters": list(params), "responses": responses}}


OBJECT: dict[str, Any] = {"type": "object"}
ARRAY: dict[str, Any] = {"type": "array", "items": {"type": "object"}}
NAMES: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
OFFSET = _query("offset", "byte offset in metrics.jsonl; rows after it", integer=True)
EPISODE_QUERY = [
    _query("offset", "first row of the page", integer=True),
    _query("limit", "rows in the page (at most 500 are returned)", integer=True),
    _query("kind", "only episodes of this kind"),
    _query("env", "only episodes of this environment"),
    _query("step", "only episodes of this step"),
    _query("id", "only the episode with this trace id"),
]
LINE = {"name": "line", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}}
TRACE = {"name": "trace", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
STATIC_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}

PATHS: dict[str, Any] = {
    "/": {
        "get": {
            "summary": "The single-page app",
            "responses": {"200": {"description": "index.html", "content": {"text/html": {}}}},
        }
    },
    "/static/{name}": {
        "get": {
            "summary": "The app's scripts, style sheet and images",
            "parameters": [STATIC_NAME],
            "responses": {
                "200": {"description": "The file", "content": {kind: {} for kind in STATIC_TYPES}},
                "404": NOT_FOUND,
            },
        }
    },
    "/api/openapi.json": _get("This document", OBJECT),
    "/api/runs": _get("Every run under the output directories", ARRAY),
    "/api/runs/{run}": _get("One run's summary", OBJECT, [RUN]),
    "/api/runs/{run}/configs": _get("The names of the run's resolved configs", NAMES, [RUN]),
    "/api/runs/{run}/config": _get(
        "One resolved config", OBJECT, [RUN, _query("name", "config name", required=True)], bad_query=True
    ),
    "/api/runs/{run}/metrics": _get("Metric rows after a byte offset", OBJECT, [RUN, OFFSET], bad_query=True),
    "/api/runs/{run}/episodes": _get("A page of episodes", OBJECT, [RUN, *EPISODE_QUERY], bad_query=True),
    "/api/runs/{run}/episodes/{line}": _get("One episode with per-token overlays", OBJECT, [RUN, LINE]),
    "/api/runs/{run}/live": _get("In-flight episodes", OBJECT, [RUN]),
    "/api/runs/{run}/live/{trace}": _get("One in-flight episode so far", OBJECT, [RUN, TRACE]),
    "/api/runs/{run}/logfiles": _get("The run's log files", ARRAY, [RUN]),
    "/api/runs/{run}/log": _get(
        "One log file, or the merged component logs", OBJECT, [RUN, _query("name", "log file name")]
    ),
    "/api/runs/{run}/reports": _get("The run's reports", ARRAY, [RUN]),
    "/api/runs/{run}/report": _get(
        "One report", OBJECT, [RUN, _query("name", "report name", required=True)], bad_query=True
    ),
    "/api/runs/{run}/results": _get("Per-source mean and stderr of an eval run", ARRAY, [RUN]),
}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "prl dashboard", "version": "1", "description": "Read-only: GET (and HEAD) only."},
    "paths": PATHS,
    "components": {"schemas": {"Error": ERROR}},
}
