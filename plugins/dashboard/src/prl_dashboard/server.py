"""The dashboard's HTTP server: the JSON API over run directories and the static app.

Standard library only (``ThreadingHTTPServer``): the dashboard must start on any machine
that has prl, including a CPU-only orchestrator node, and it serves one user. GET only;
nothing here writes to a run (any other method is a 405 with ``Allow``). Routes (``docs/dashboard.md``)::

    /                                   the single-page app (static/index.html)
    /static/<file>                      its script and style sheet
    /api/openapi.json                   the OpenAPI document of these routes
    /api/runs                           every run under the output directories
    /api/runs/{run}                     one run's summary
    /api/runs/{run}/configs | config?name=
    /api/runs/{run}/metrics?offset=     rows after a byte offset (a page follows a live run)
    /api/runs/{run}/episodes?offset=&limit=&kind=&env=&step=
    /api/runs/{run}/episodes/{line}     the full trace with per-token overlays
    /api/runs/{run}/live                in-flight episodes (pending and running)
    /api/runs/{run}/live/{trace}        one in-flight episode's prompt and events so far
    /api/runs/{run}/logfiles | log?name=  (no name: the merged component logs)
    /api/runs/{run}/reports | report?name=
    /api/runs/{run}/results             per-source mean ± stderr of a prl eval run

A run id may contain ``/``; the app sends it percent-encoded as one path segment.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from prl_dashboard import episodes, live, openapi, results, runs
from prl_dashboard.runs import NotFound, Run

log = logging.getLogger("prl.dashboard")
STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
DISCOVERY_TTL = 2.0  # seconds a run listing is reused (the app polls every 5 s)


class Catalog:
    """The runs under the output directories, rediscovered at most every DISCOVERY_TTL s
    (new runs appear without a restart)."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots
        self._runs: dict[str, Run] = {}
        self._at = 0.0

    def all(self) -> dict[str, Run]:
        if time.monotonic() - self._at > DISCOVERY_TTL:
            self._runs = runs.discover(self.roots)
            self._at = time.monotonic()
        return self._runs

    def get(self, rid: str) -> Run:
        run = self.all().get(rid)
        if run is None:
            self._at = 0.0  # a run made since the last listing
            run = self.all().get(rid)
        if run is None:
            raise NotFound(f"run {rid!r}")
        return run


def _need(query: dict[str, str], key: str) -> str:
    if not query.get(key):
        raise episodes.BadQuery(f"{key}: query parameter required")
    return query[key]


def _offset(query: dict[str, str]) -> int:
    try:
        value = int(query.get("offset", 0))
    except ValueError:
        raise episodes.BadQuery(f"offset: expected a byte offset, got {query.get('offset')!r}") from None
    if value < 0:
        raise episodes.BadQuery("offset: must be >= 0")
    return value


def _episode_line(tail: list[str]) -> int:
    if not tail[0].isascii() or not tail[0].isdigit():  # int() would take "-1", " 1", "1_0"
        raise NotFound(f"episode {tail[0]!r}")
    return int(tail[0])


# (sub-resource, handler(run, query, rest-of-path)) for /api/runs/{run}/<sub>[/...]
RunRoute = Callable[[Run, dict[str, str], list[str]], Any]
RUN_ROUTES: dict[str, RunRoute] = {
    "": lambda run, q, t: runs.summary(run),
    "configs": lambda run, q, t: runs.configs(run),
    "config": lambda run, q, t: runs.config(run, _need(q, "name")),
    "metrics": lambda run, q, t: runs.metrics(run, _offset(q)),
    "logfiles": lambda run, q, t: runs.logfiles(run),
    "log": lambda run, q, t: runs.log(run, q["name"]) if q.get("name") else {"lines": runs.merged_log(run)},
    "reports": lambda run, q, t: runs.reports(run),
    "results": lambda run, q, t: results.results(run),
    "report": lambda run, q, t: runs.report(run, _need(q, "name")),
    "episodes": lambda run, q, t: episodes.episode(run, _episode_line(t)) if t else episodes.page(run, q),
    "live": lambda run, q, t: live.episode(run, t[0]) if t else live.listing(run),
}
TAILED = ("episodes", "live")  # the sub-resources that take one more path segment


class Handler(BaseHTTPRequestHandler):
    """One request: an API answer as JSON, a static file, or a JSON error. GET and HEAD
    only; any other method is a 405 naming them in ``Allow`` (RFC 9110 §15.5.6)."""

    catalog: Catalog  # set on the subclass made by make_server
    server_version = "prl-dashboard"

    def do_HEAD(self) -> None:  # noqa: N802 (the http.server name)
        self.do_GET()  # _send leaves the body out

    def _not_allowed(self) -> None:
        self._json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{self.command} not allowed: the dashboard is read-only"})

    def __getattr__(self, name: str) -> Any:
        # http.server answers a method without a do_<METHOD> with 501; any method but GET
        # and HEAD (POST, DELETE, QUERY, ...) is one this read-only server knows and refuses.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        parts = urlsplit(self.path)
        # Split before unquoting so that an encoded "/" stays inside its segment.
        segments = [unquote(s) for s in parts.path.split("/") if s]
        query = dict(parse_qsl(parts.query))
        try:
            if not segments or segments == ["index.html"]:
                return self._static("index.html")
            if segments[0] == "static" and len(segments) == 2:
                return self._static(segments[1])
            if segments[0] == "api":
                return self._json(HTTPStatus.OK, self._api(segments[1:], query))
            raise NotFound(parts.path)
        except NotFound as exc:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"not found: {exc}"})
        except episodes.BadQuery as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away mid-answer
        except Exception as exc:  # one bad file must not take the dashboard down
            log.exception("dashboard: %s failed", self.path)
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})

    def _api(self, segments: list[str], query: dict[str, str]) -> Any:
        if segments == ["openapi.json"]:
            return openapi.DOCUMENT
        if segments == ["runs"]:
            return [runs.summary(r) for r in self.catalog.all().values()]
        if len(segments) >= 2 and segments[0] == "runs":
            run = self.catalog.get(segments[1])
            sub = segments[2] if len(segments) > 2 else ""
            route = RUN_ROUTES.get(sub)
            tail = segments[3:]
            if route is None or (tail and sub not in TAILED) or len(tail) > 1:
                raise NotFound("/".join(segments))
            return route(run, query, tail)
        raise NotFound("/api/" + "/".join(segments))

    def _static(self, name: str) -> None:
        asset = resources.files("prl_dashboard") / "static" / name
        kind = STATIC_TYPES.get(Path(name).suffix)
        if kind is None or "/" in name or name.startswith(".") or not asset.is_file():
            raise NotFound(name)
        self._send(HTTPStatus.OK, asset.read_bytes(), kind + "; charset=utf-8")

    def _json(self, status: HTTPStatus, payload: Any) -> None:
        try:
            body = json.dumps(payload, allow_nan=False, default=str)
        except ValueError:  # a NaN read back from a file: JSON.parse in the browser would fail
            body = json.dumps(_finite(payload), default=str)
        self._send(status, body.encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        # Images come from the dashboard itself or inline data: URLs (rollout thumbnails),
        # never from elsewhere: a URL in a rollout's messages must not make the browser call out.
        self.send_header("Content-Security-Policy", "img-src 'self' data:")
        if status == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", "GET, HEAD")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the http.server name)
        log.debug("dashboard: " + format, *args)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def make_server(roots: list[Path], host: str, port: int) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (OSError when taken), not yet serving."""
    handler = type("BoundHandler", (Handler,), {"catalog": Catalog(roots)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
