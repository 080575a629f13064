"""The HTTP side of :class:`prl.testing.hub.LocalHub`: which route answers what, with the
real hub's status codes and headers.

The handler reaches its hub as ``self.server.hub`` (set by ``LocalHub.start``) and only
uses its repos, token and log, so this module does not import :mod:`prl.testing.hub`.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

# The words that follow the repo id in /api/{models,datasets}/{repo_id}/<verb>[/<revision>].
_API_VERBS = ("revision", "tree", "paths-info", "refs")


class HubError(Exception):
    """An error answer: the status, and the ``X-Error-Code`` by which ``huggingface_hub``
    picks its exception (RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound)."""

    def __init__(self, status: int, code: str | None, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.extra = dict(headers or {})

    def headers(self) -> dict[str, str]:
        out = {"X-Error-Message": self.message, **self.extra}
        if self.code:
            out["X-Error-Code"] = self.code
        return out


@dataclass(frozen=True)
class HubRequest:
    """One logged request. ``body`` is true when a file's content was sent: a GET of a
    resolve URL answered with the file itself, or of a CDN blob URL."""

    method: str
    path: str
    status: int
    repo_type: str | None = None
    repo_id: str | None = None
    filename: str | None = None
    body: bool = False


def _directories(files: Mapping[str, Any]) -> set[str]:
    return {path.rsplit("/", i)[0] for path in files for i in range(1, path.count("/") + 1)}


def _directory_entry(directory: str, files: Mapping[str, Any]) -> dict[str, Any]:
    digest = hashlib.sha1(directory.encode())
    for path in sorted(p for p in files if p.startswith(directory + "/")):
        digest.update(f"{path}\0{files[path].oid}\0".encode())
    return {"type": "directory", "oid": digest.hexdigest(), "size": 0, "path": directory}


def tree_entries(files: Mapping[str, Any], path: str, recursive: bool) -> list[dict[str, Any]]:
    """The listing of ``path`` (the root when empty): its children, or with ``recursive``
    everything below it, folders first as the hub lists them."""
    path = path.strip("/")
    directories = _directories(files)
    if path and path not in directories:
        raise HubError(404, "EntryNotFound", f"{path} does not exist on this revision")
    prefix = f"{path}/" if path else ""

    def wanted(p: str) -> bool:
        return p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :])

    folders = [_directory_entry(d, files) for d in sorted(directories) if wanted(d)]
    return folders + [f.entry() for p, f in files.items() if wanted(p)]


def paths_info(files: Mapping[str, Any], paths: list[str]) -> list[dict[str, Any]]:
    """The entries of those of ``paths`` that exist (files or folders); others are left out."""
    directories = _directories(files)
    out = []
    for path in (p.strip("/") for p in paths):
        if path in files:
            out.append(files[path].entry())
        elif path in directories:
            out.append(_directory_entry(path, files))
    return out


def byte_range(header: str, size: int) -> tuple[int, int]:
    """(first, last) byte of a single ``bytes=`` range; 416 when no byte of the file is in
    it. A header this server does not parse (several ranges) raises ValueError: the caller
    sends the whole file, as HTTP allows."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        raise ValueError(header)
    first, _, last = spec.strip().partition("-")
    if not first:  # bytes=-N: the last N bytes
        start, end = max(size - int(last), 0), size - 1
    else:
        start, end = int(first), min(int(last), size - 1) if last else size - 1
    if start > end or start >= size:
        raise HubError(416, None, "Requested Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
    return start, end


class HubHandler(BaseHTTPRequestHandler):
    # One request per connection: after LocalHub.down() no pooled connection can still answer.
    protocol_version = "HTTP/1.0"
    server_version = "LocalHub/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Requests go to the hub's log, not to stderr."""

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        hub = self.server.hub  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        self.note: dict[str, Any] = {}
        try:
            if self.server.role == "cdn":  # type: ignore[attr-defined]
                self._cdn(hub, url)
            else:
                self._hub(hub, url)
        except HubError as e:
            self.note["body"] = False
            self._send(e.status, json.dumps({"error": e.message}).encode(), e.headers(), "application/json")

    def _send(self, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None, ctype: str = "") -> None:
        """Answer; a HEAD gets the headers of the GET, Content-Length included, and no body.
        The request is logged first, so the log is complete once the client has its answer."""
        path = unquote(urlsplit(self.path).path)
        self.server.hub.record(HubRequest(self.command, path, status, **self.note))  # type: ignore[attr-defined]
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", ctype or "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value: Any) -> int:
        self._send(200, json.dumps(value).encode(), ctype="application/json; charset=utf-8")
        return 200

    # -- the hub ---------------------------------------------------------------------------

    def _hub(self, hub: Any, url: Any) -> int:
        authorization = self.headers.get("Authorization")
        if authorization and not hub.authorized(authorization):
            # The hub refuses an unknown token on every route, public repos included.
            raise HubError(401, None, "Invalid credentials in Authorization header")
        segments = url.path.strip("/").split("/")
        if len(segments) >= 3 and segments[0] == "api" and segments[1] in ("models", "datasets"):
            return self._api(hub, segments[1][:-1], segments[2:], parse_qs(url.query))
        repo_type = "model"
        if segments[0] == "datasets":
            repo_type, segments = "dataset", segments[1:]
        if "resolve" in segments[1:3] and self.command in ("GET", "HEAD"):
            at = segments.index("resolve", 1)
            return self._resolve(hub, repo_type, unquote("/".join(segments[:at])), segments[at + 1 :])
        raise HubError(404, None, "Sorry, we can't find the page you are looking for.")

    def _repo(self, hub: Any, repo_type: str, repo_id: str) -> Any:
        self.note.update(repo_type=repo_type, repo_id=repo_id)
        return hub.repo(repo_type, repo_id)

    @staticmethod
    def _commit(repo: Any, revision: str) -> str:
        sha = repo.resolve(revision)
        if sha is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return sha

    def _api(self, hub: Any, repo_type: str, rest: list[str], params: dict[str, list[str]]) -> int:
        """Repo info, refs, tree listing and paths-info. They are public for gated repos too: only
        file contents are gated on the hub."""
        n = 1 if len(rest) == 1 or rest[1] in _API_VERBS else 2
        repo = self._repo(hub, repo_type, unquote("/".join(rest[:n])))
        if len(rest) == n and self.command == "GET":
            return self._json(repo.info(self._commit(repo, "main"), _flag(params, "blobs")))
        if rest[n:] == ["refs"] and self.command == "GET":
            return self._json(repo.git_refs())
        if len(rest) < n + 2 or rest[n] not in _API_VERBS:
            raise HubError(404, None, "Sorry, we can't find the page you are looking for.")
        verb, tail = rest[n], rest[n + 2 :]
        files = repo.commits[sha := self._commit(repo, unquote(rest[n + 1]))]
        if verb == "revision" and self.command == "GET":
            return self._json(repo.info(sha, _flag(params, "blobs")))
        if verb == "tree" and self.command == "GET":
            return self._json(tree_entries(files, unquote("/".join(tail)), _flag(params, "recursive")))
        if verb == "paths-info" and self.command == "POST":
            return self._json(paths_info(files, self._posted_paths()))
        raise HubError(405, None, f"{self.command} is not allowed here")

    def _posted_paths(self) -> list[str]:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        if "json" in (self.headers.get("Content-Type") or ""):
            return list(json.loads(body or "{}").get("paths", []))
        return parse_qs(body).get("paths", [])

    def _resolve(self, hub: Any, repo_type: str, repo_id: str, rest: list[str]) -> int:
        repo = self._repo(hub, repo_type, repo_id)
        if repo.gated and not hub.authorized(self.headers.get("Authorization")):
            raise HubError(
                401,
                "GatedRepo",
                f"Access to {repo_type} {repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
            )
        if len(rest) < 2:
            raise HubError(404, None, "Sorry, we can't find the page you are looking for.")
        sha = self._commit(repo, unquote(rest[0]))
        path = self.note["filename"] = unquote("/".join(rest[1:]))
        f = repo.commits[sha].get(path)
        if f is None:
            # With the commit, so the client can cache that the file is absent at it.
            raise HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": sha})
        headers = {"X-Repo-Commit": sha, "ETag": f'"{f.oid}"', "Accept-Ranges": "bytes"}
        if f.sha256 is None:
            return self._send_file(f, headers)
        # An LFS file: the hub answers with a redirect to its CDN, and the metadata of the
        # linked file (its sha256 and size) in headers of the redirect itself.
        headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(len(f.data))})
        headers["Location"] = hub.blob_url(repo, f)
        self._send(302, b"", headers)
        return 302

    # -- the CDN ---------------------------------------------------------------------------

    def _cdn(self, hub: Any, url: Any) -> int:
        """``/lfs/<sha256>?repo_type=&repo_id=&path=``: like a signed URL, no token needed."""
        segments = url.path.strip("/").split("/")
        params = parse_qs(url.query)
        if self.command not in ("GET", "HEAD") or len(segments) != 2 or segments[0] != "lfs":
            raise HubError(404, None, "Not Found")
        repo_type, repo_id, path = (params.get(k, [""])[0] for k in ("repo_type", "repo_id", "path"))
        self.note.update(repo_type=repo_type, repo_id=repo_id, filename=path)
        repo = hub.repos.get((repo_type, repo_id))
        found = [
            f
            for files in (repo.commits.values() if repo else [])
            for f in files.values()
            if f.sha256 == segments[1] and f.path == path
        ]
        if not found:
            raise HubError(403, None, "Access Denied")  # what the CDN says to an unsigned URL
        name = quote(posixpath.basename(path))
        disposition = f"attachment; filename*=UTF-8''{name}; filename=\"{name}\";"
        return self._send_file(found[0], {"ETag": f'"{segments[1]}"', "Content-Disposition": disposition})

    def _send_file(self, f: Any, headers: dict[str, str]) -> int:
        """The file, or the byte range the request names (206, with Content-Range)."""
        data, status, size = f.data, 200, len(f.data)
        headers = {**headers, "Accept-Ranges": "bytes"}
        try:
            span = byte_range(self.headers["Range"], size) if self.headers.get("Range") else None
        except ValueError:
            span = None
        if span is not None:
            status, data = 206, data[span[0] : span[1] + 1]
            headers["Content-Range"] = f"bytes {span[0]}-{span[1]}/{size}"
        self.note["body"] = self.command == "GET"
        self._send(status, data, headers, mimetypes.guess_type(f.path)[0] or "application/octet-stream")
        return status


def _flag(params: dict[str, list[str]], name: str) -> bool:
    return (params.get(name) or ["false"])[0].lower() in ("1", "true")
