"""A local stand-in for the Hugging Face Hub, so tests can download models and datasets by
name with no network.

:class:`LocalHub` serves repos whose files are a local directory's files, answering the routes
the real ``huggingface_hub`` client calls (repo info, tree listing, paths-info, HEAD/GET of
``/resolve/`` URLs) with the hub's headers, status codes and ``X-Error-Code`` values, so the
client raises its real exceptions. "LFS" files (``*.safetensors``, ``*.parquet``, ...) are
redirected to a second server, as the hub redirects them to its CDN: the client then takes
their metadata from the redirect and downloads the body from another origin. Xet is never
advertised, so bodies travel over plain HTTP.

Every request is logged (:attr:`LocalHub.log`), so a test can assert what a run fetched.
:mod:`prl.testing.hub_setup` points the clients at a hub (the ``local_hub`` fixture).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from prl.testing.hub_routes import HubError, HubHandler, HubRequest

# The patterns of the hub's default .gitattributes that tiny test repos can hold: files that
# match are stored in LFS, so the hub redirects their downloads to its CDN.
LFS_SUFFIXES = (
    ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".npy", ".npz",
    ".pkl", ".parquet", ".arrow", ".model", ".gz", ".zip", ".zst", ".tar",
)  # fmt: skip
# The hub's pre-receive hook moves any file above 10 MB to LFS, whatever its name.
LFS_MIN_SIZE = 10 * 1024 * 1024
# The first line of a Git LFS pointer file names its format by this URL.
LFS_POINTER_VERSION = "https://git-lfs.github.com/" + "sp" + "ec/v1"  # split: not a citation of prl's docs
DEFAULT_TOKEN = "hf_localhub_test_token"
_LAST_MODIFIED = "2024-01-01T00:00:00.000Z"


def git_blob_oid(data: bytes) -> str:
    """The git object id of a blob holding ``data`` (what the hub calls a file's ``oid``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class HubFile:
    """One file of one commit. For an LFS file ``oid`` is the pointer file's blob id, as on
    the hub, and ``sha256`` the content's hash (the ETag its download is cached under)."""

    path: str
    data: bytes
    oid: str
    sha256: str | None = None
    pointer_size: int = 0

    @classmethod
    def of(cls, path: str, data: bytes) -> HubFile:
        if not (path.endswith(LFS_SUFFIXES) or len(data) >= LFS_MIN_SIZE):
            return cls(path, data, git_blob_oid(data))
        sha256 = hashlib.sha256(data).hexdigest()
        pointer = f"version {LFS_POINTER_VERSION}\noid sha256:{sha256}\nsize {len(data)}\n".encode()
        return cls(path, data, git_blob_oid(pointer), sha256, len(pointer))

    @property
    def etag(self) -> str:
        return self.sha256 or self.oid

    def entry(self) -> dict[str, Any]:
        """The file as the tree and paths-info routes list it."""
        out: dict[str, Any] = {"type": "file", "oid": self.oid, "size": len(self.data), "path": self.path}
        if self.sha256:
            out["lfs"] = {"oid": self.sha256, "size": len(self.data), "pointerSize": self.pointer_size}
        return out

    def sibling(self, blobs: bool) -> dict[str, Any]:
        """The file as repo info lists it; sizes and ids only when asked for (``?blobs=true``)."""
        out: dict[str, Any] = {"rfilename": self.path}
        if blobs:
            out.update(size=len(self.data), blobId=self.oid)
            if self.sha256:
                out["lfs"] = {"size": len(self.data), "sha256": self.sha256, "pointerSize": self.pointer_size}
        return out


def read_files(directory: str | Path) -> dict[str, HubFile]:
    """Every file under ``directory`` (recursively, ``.git`` left out), by repo-relative path."""
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"repo directory {root} does not exist or is not a directory")
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts):
        rel = path.relative_to(root).as_posix()
        files[rel] = HubFile.of(rel, path.read_bytes())
    return files


@dataclass
class HubRepo:
    """A model or dataset repo: named refs pointing at commits; the names in ``tags`` are
    tags, the others branches."""

    repo_type: str
    repo_id: str
    gated: bool = False
    refs: dict[str, str] = field(default_factory=dict)
    tags: set[str] = field(default_factory=set)
    commits: dict[str, dict[str, HubFile]] = field(default_factory=dict)

    def commit(self, files: dict[str, HubFile]) -> str:
        """Store ``files`` as a commit; its sha is a digest of the repo and the content, so the
        same directory always gives the same 40-hex sha and two refs to it share one commit."""
        digest = hashlib.sha1(f"{self.repo_type}\0{self.repo_id}\0".encode())
        for path, f in files.items():
            digest.update(f"{path}\0{f.oid}\0".encode())
        sha = digest.hexdigest()
        self.commits[sha] = files
        return sha

    def sha(self, revision: str = "main") -> str:
        """The commit sha a branch or tag points at."""
        return self.refs[revision]

    def resolve(self, revision: str) -> str | None:
        """The commit of a branch, tag (also as ``refs/heads/x`` / ``refs/tags/x``) or commit sha."""
        name = revision.removeprefix("refs/heads/").removeprefix("refs/tags/")
        if name in self.refs:
            return self.refs[name]
        return revision if revision in self.commits else None

    def git_refs(self) -> dict[str, Any]:
        """The JSON of ``/api/{models,datasets}/{repo}/refs``."""
        listed: dict[str, list[dict[str, str]]] = {"branches": [], "tags": [], "converts": [], "pullRequests": []}
        for name, sha in sorted(self.refs.items()):
            kind, ref = ("tags", f"refs/tags/{name}") if name in self.tags else ("branches", f"refs/heads/{name}")
            listed[kind].append({"name": name, "ref": ref, "targetCommit": sha})
        return listed

    def info(self, sha: str, blobs: bool) -> dict[str, Any]:
        """The JSON of ``/api/{models,datasets}/{repo}[/revision/{rev}]``."""
        namespace, _, _ = self.repo_id.rpartition("/")
        body: dict[str, Any] = {
            "_id": hashlib.sha1(self.repo_id.encode()).hexdigest()[:24],
            "id": self.repo_id,
            "author": namespace or None,
            "sha": sha,
            "lastModified": _LAST_MODIFIED,
            "createdAt": _LAST_MODIFIED,
            "private": False,
            "disabled": False,
            "gated": "auto" if self.gated else False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": [f.sibling(blobs) for f in self.commits[sha].values()],
        }
        if self.repo_type == "model":
            body["modelId"] = self.repo_id
        return body


class LocalHub:
    """The hub server (``url``, for ``HF_ENDPOINT``) and its CDN for LFS files (``cdn_url``),
    the hub on 127.0.0.1 and the CDN on 127.0.0.2 (another host), with OS-picked ports, each serving from a thread.

    ``token`` is the one token the hub accepts: a gated repo's files need
    ``Authorization: Bearer <token>``, and any other bearer token is refused as invalid
    credentials, as the real hub refuses an unknown token.
    """

    def __init__(self, token: str = DEFAULT_TOKEN) -> None:
        self.token = token
        self.repos: dict[tuple[str, str], HubRepo] = {}
        self._log: list[HubRequest] = []
        self._lock = threading.Lock()
        self._servers: dict[str, ThreadingHTTPServer] = {}
        self._ports: dict[str, int] = {"hub": 0, "cdn": 0}
        # The CDN is another host, as on the real hub: clients then read a file's metadata
        # from the hub's redirect itself and do not follow it (huggingface_hub >= 1.x).
        self._hosts = {"hub": "127.0.0.1", "cdn": "127.0.0.2"}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalHub:
        """Start answering (again, on the same ports, after :meth:`down`)."""
        for role in ("hub", "cdn"):
            if role not in self._servers:
                server = ThreadingHTTPServer((self._hosts[role], self._ports[role]), HubHandler)
                server.daemon_threads = True
                server.hub = self  # type: ignore[attr-defined]
                server.role = role  # type: ignore[attr-defined]
                self._ports[role] = server.server_address[1]
                self._servers[role] = server
                # a short poll interval: down() waits for the serving loop to notice
                serve = threading.Thread(target=server.serve_forever, args=(0.05,), name=f"local-hub-{role}")
                serve.daemon = True
                serve.start()
        return self

    up = start

    def down(self) -> None:
        """Stop answering: the listening sockets close, so clients get "connection refused"
        as with no network. Every response closes its connection (HTTP/1.0), so no pooled
        connection outlives this either."""
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
        self._servers.clear()

    stop = down

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.down()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._ports['hub']}"

    @property
    def cdn_url(self) -> str:
        return f"http://{self._hosts['cdn']}:{self._ports['cdn']}"

    # -- repos -----------------------------------------------------------------------------

    def add_model(
        self,
        repo_id: str,
        directory: str | Path,
        *,
        gated: bool = False,
        revisions: Mapping[str, str | Path] | None = None,
        tags: Mapping[str, str | Path] | None = None,
    ) -> HubRepo:
        """Serve ``directory``'s files as model ``repo_id`` at branch ``main``; ``revisions``
        maps more branch names, ``tags`` tag names, to directories (the same directory gives
        the same commit). Adding a repo again is a push: its refs move, and older commits stay
        reachable by sha."""
        return self._add("model", repo_id, directory, gated, revisions, tags)

    def add_dataset(
        self,
        repo_id: str,
        directory: str | Path,
        *,
        gated: bool = False,
        revisions: Mapping[str, str | Path] | None = None,
        tags: Mapping[str, str | Path] | None = None,
    ) -> HubRepo:
        """The same as :meth:`add_model`, for a dataset repo."""
        return self._add("dataset", repo_id, directory, gated, revisions, tags)

    def _add(self, repo_type: str, repo_id: str, directory, gated, revisions, tags) -> HubRepo:
        if repo_id.count("/") > 1 or not repo_id.strip("/"):
            raise ValueError(f"repo_id must be 'name' or 'namespace/name' (got {repo_id!r})")
        branches, tags = {"main": directory, **(revisions or {})}, dict(tags or {})
        if both := sorted(set(branches) & set(tags)):
            raise ValueError(f"{', '.join(both)} named both as a branch (revisions) and as a tag (tags)")
        contents = {name: read_files(path) for name, path in {**branches, **tags}.items()}  # a bad one adds nothing
        with self._lock:
            repo = self.repos.setdefault((repo_type, repo_id), HubRepo(repo_type, repo_id))
            repo.gated = gated
            for name, files in contents.items():
                repo.refs[name] = repo.commit(files)
            repo.tags = (repo.tags - set(branches)) | set(tags)
        return repo

    def repo(self, repo_type: str, repo_id: str) -> HubRepo:
        found = self.repos.get((repo_type, repo_id))
        if found is None:
            raise HubError(404, "RepoNotFound", "Repository not found")
        return found

    def authorized(self, authorization: str | None) -> bool:
        return authorization == f"Bearer {self.token}"

    def blob_url(self, repo: HubRepo, f: HubFile) -> str:
        """Where the CDN serves an LFS file; like a signed URL it needs no token."""
        query = urlencode({"repo_type": repo.repo_type, "repo_id": repo.repo_id, "path": f.path})
        return f"{self.cdn_url}/lfs/{f.sha256}?{query}"

    # -- request log -----------------------------------------------------------------------

    def record(self, request: HubRequest) -> None:
        with self._lock:
            self._log.append(request)

    @property
    def log(self) -> list[HubRequest]:
        """Every request so far, oldest first (a copy)."""
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def file_downloads(self, repo_id: str | None = None, repo_type: str | None = None) -> list[str]:
        """The files whose content was sent (of one repo, or of all), in request order."""
        return [
            r.filename
            for r in self.log
            if r.body
            and r.filename
            and (repo_id is None or r.repo_id == repo_id)
            and (repo_type is None or r.repo_type == repo_type)
        ]


__all__ = ["DEFAULT_TOKEN", "HubError", "HubFile", "HubRepo", "HubRequest", "LocalHub", "git_blob_oid", "read_files"]
