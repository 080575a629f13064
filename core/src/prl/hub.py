"""Models and datasets named by Hugging Face Hub id: what a config needs, what is already
cached, and fetching the rest once, before any component starts.

A name is either a local path or a hub repo id. A path (one that exists, or one spelled as a
path: starting with ``/``, ``.`` or ``~``, or ending in a data-file suffix) must exist; a
hub id is fetched into the shared Hugging Face cache by the command that launches the run,
with ``huggingface_hub``'s own progress bars, ``HF_TOKEN`` and ``HF_ENDPOINT``. The trainer
and inference processes then read that cache with ``HF_HUB_OFFLINE=1`` (prl.rl_launch), so
they load the very snapshot fetched here and never download beside each other.

Every failure (offline with the name not cached, a repo that does not exist, a gated repo
without a token, a revision that does not exist, the disk filling) is one line naming the
config field, exit 2. ``huggingface_hub`` writes each file under a temporary name and only
then into the snapshot, and a cached snapshot is used only when its recorded file listing
is complete, so a download that broke off is never loaded later.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prl.config.errors import ConfigError, HostError

# Files a component that only tokenizes (orchestrator, eval) needs of a model repo.
TOKENIZER_FILES = ["*.json", "*.txt", "*.model", "*.jinja", "*.tiktoken"]
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".arrow", ".txt")
# The hub's repo id grammar: an optional namespace and a name, letters, digits, - _ .
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")
_FULL_DISK = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
# The environment of the processes that load weights (trainer, inference) once the launching
# command has fetched: cache only. Env servers keep the hub (a taskset may load its data).
READ_CACHE_ENV = {"HF_HUB_OFFLINE": "1"}


@dataclass(frozen=True)
class Need:
    """One model or dataset a config names, under the field the user set."""

    field: str
    """Dotted config path, e.g. ``model.name`` or ``data.name``."""
    kind: str
    """``model`` or ``dataset``."""
    name: str
    revision: str | None = None
    tokenizer_only: bool = False
    """Only the tokenizer and config files are needed (a component that never loads weights)."""

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    @property
    def repo_type(self) -> str:
        return "dataset" if self.kind == "dataset" else "model"

    @property
    def patterns(self) -> list[str] | None:
        return TOKENIZER_FILES if self.tokenizer_only else None


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache directory, found the way huggingface_hub finds it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "huggingface" / "hub"


def offline() -> bool:
    """True when the user switched the hub off (``HF_HUB_OFFLINE``), as huggingface_hub reads it."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def spelled_as_path(name: str) -> bool:
    """A name the user wrote as a path: it can only be local, never a hub id."""
    return name.startswith(("/", ".", "~")) or name.lower().endswith(DATA_SUFFIXES)


def is_local(name: str) -> bool:
    return spelled_as_path(name) or Path(name).expanduser().exists()


def check_name(need: Need) -> None:
    """A path that does not exist, or a name that is neither a path nor a hub id: one line."""
    if is_local(need.name):
        if not Path(need.name).expanduser().exists():
            raise ConfigError(f"{need.flag}: {need.kind} path '{need.name}' does not exist")
        return
    if not _REPO_ID.match(need.name) or ".." in need.name or "--" in need.name:
        raise ConfigError(
            f"{need.flag}: '{need.name}' is neither an existing path nor a Hugging Face repo id (org/name)"
        )


def hub_needs(needs: Iterable[Need]) -> list[Need]:
    """The hub ids among ``needs`` (each name once, under its first field), all names checked.
    A name needed in full and tokenizer-only elsewhere is needed in full."""
    out: dict[tuple[str, str, str | None], Need] = {}
    for need in needs:
        if not need.name:
            continue
        check_name(need)
        if is_local(need.name):
            continue
        key = (need.kind, need.name, need.revision)
        first = out.get(key)
        if first is None:
            out[key] = need
        elif first.tokenizer_only and not need.tokenizer_only:
            out[key] = Need(first.field, first.kind, first.name, first.revision, False)
    return list(out.values())


def cached_snapshot(need: Need) -> Path | None:
    """The complete cached snapshot of a hub id, without any network request; None if absent."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        path = snapshot_download(
            need.name,
            repo_type=need.repo_type,
            revision=need.revision,
            allow_patterns=need.patterns,
            local_files_only=True,
            cache_dir=hf_hub_cache(),
        )
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError):
        return None
    return Path(path)


def local_dir(name: str, kind: str = "model", revision: str | None = None) -> Path | None:
    """Where ``name`` is on this machine: the path itself or its cached snapshot."""
    if is_local(name):
        path = Path(name).expanduser()
        return path if path.exists() else None
    return cached_snapshot(Need("", kind, name, revision))


def missing(needs: Iterable[Need]) -> list[Need]:
    """The hub ids of ``needs`` not yet (completely) in the cache."""
    return [need for need in hub_needs(needs) if cached_snapshot(need) is None]


def fetch(needs: Iterable[Need], say=print) -> dict[Need, Path]:
    """Download every hub id of ``needs`` not yet cached, one after the other, with
    huggingface_hub's progress bars. Returns each hub id's snapshot directory."""
    out: dict[Need, Path] = {}
    for need in hub_needs(needs):
        cached = cached_snapshot(need)
        if cached is not None:
            out[need] = cached
            continue
        if offline():
            raise ConfigError(_not_cached(need, "HF_HUB_OFFLINE is set"))
        say(f"prl: fetching {need.kind} {need.name}{_at(need)} from {_endpoint()} into {hf_hub_cache()}")
        out[need] = _download(need)
    return out


def _download(need: Need) -> Path:
    from huggingface_hub import snapshot_download

    try:
        with _hub_errors(need):
            return Path(
                snapshot_download(
                    need.name,
                    repo_type=need.repo_type,
                    revision=need.revision,
                    allow_patterns=need.patterns,
                    cache_dir=hf_hub_cache(),
                    endpoint=_endpoint(),
                )
            )
    except _Unreachable as exc:
        raise ConfigError(_not_cached(need, f"the hub did not answer ({exc})")) from None


def read_cache_only() -> None:
    """From now on this process and its children load hub ids from the cache alone (after
    :func:`fetch`): the same snapshot everywhere, no request per file."""
    os.environ.update(READ_CACHE_ENV)
    import sys

    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True


@dataclass
class Planned:
    """What a launch would fetch for one hub id (a dry run asks the hub, downloads nothing)."""

    need: Need
    files: int | None = None
    size: int | None = None
    note: str = ""

    def line(self) -> str:
        what = f"{self.need.kind} {self.need.name}{_at(self.need)} ({self.need.field})"
        if self.size is None:
            return f"would fetch {what}: size unknown, {self.note}"
        return f"would fetch {what}: {self.files} files, {human(self.size)}"


def plan(needs: Iterable[Need]) -> list[Planned]:
    """For a dry run: each hub id a launch would download, with its size when the hub
    answers. A repo the hub says does not exist is the same one-line error as at launch."""
    out = []
    for need in missing(needs):
        if offline():
            out.append(Planned(need, note="HF_HUB_OFFLINE is set: the launch will stop unless it is fetched first"))
            continue
        try:
            with _hub_errors(need):
                files = _listing(need)
        except _Unreachable as exc:
            out.append(Planned(need, note=f"the hub did not answer ({exc})"))
            continue
        out.append(Planned(need, len(files), sum(size for _, size in files)))
    return out


def _listing(need: Need) -> list[tuple[str, int]]:
    """``(path, size)`` of the files a fetch of ``need`` downloads, from the hub's repo info."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import filter_repo_objects

    info = HfApi(endpoint=_endpoint()).repo_info(
        need.name, repo_type=need.repo_type, revision=need.revision, files_metadata=True
    )
    sizes = {s.rfilename: (s.lfs.size if s.lfs else s.size) or 0 for s in info.siblings or []}
    return [(f, sizes[f]) for f in filter_repo_objects(list(sizes), allow_patterns=need.patterns)]


class _Unreachable(Exception):
    """The hub could not be reached (no network, or it is down)."""


class _hub_errors:
    """Turns huggingface_hub's exceptions into one line naming the field."""

    def __init__(self, need: Need) -> None:
        self.need = need

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None:
            return False
        message = _explain(self.need, exc)
        if message is None:
            return False
        raise message from None


def _explain(need: Need, exc: BaseException) -> BaseException | None:
    from huggingface_hub import errors as e

    name, flag = need.name, need.flag
    if isinstance(exc, e.GatedRepoError):
        return ConfigError(
            f"{flag}: '{name}' is gated on the Hugging Face Hub: accept its terms on its page, "
            "then set HF_TOKEN to a token of that account"
        )
    if isinstance(exc, e.RevisionNotFoundError):
        field = "--" + need.field.rsplit(".", 1)[0].replace("_", "-") + ".revision" if need.revision else flag
        return ConfigError(f"{field}: revision '{need.revision or 'main'}' of {need.kind} '{name}' does not exist")
    if isinstance(exc, e.RepositoryNotFoundError):
        token = "" if os.environ.get("HF_TOKEN") else " (if it is private, set HF_TOKEN)"
        return ConfigError(f"{flag}: {need.kind} '{name}' does not exist on the Hugging Face Hub{token}")
    if isinstance(exc, OSError) and exc.errno in _FULL_DISK:
        return HostError(
            f"{flag}: the disk filled while downloading '{name}' into {hf_hub_cache()} ({exc.strerror}); "
            "free space or point HF_HUB_CACHE elsewhere (the partial download is not used)"
        )
    if isinstance(exc, e.HfHubHTTPError) and exc.response is not None and exc.response.status_code in (401, 403):
        return ConfigError(f"{flag}: the Hugging Face Hub refused access to '{name}': set HF_TOKEN")
    cause = _connection_error(exc)
    if cause is not None:
        return _Unreachable(f"{_endpoint()} unreachable: {cause}")
    return None


_CONNECTION = {"ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException", "ConnectionError"}


def _connection_error(exc: BaseException) -> str | None:
    """The name of the network failure behind ``exc`` (huggingface_hub wraps it in a
    'not in the cache' error when it falls back to the cache), or None."""
    from huggingface_hub import errors as e

    for link in _chain(exc):
        if type(link).__name__ in _CONNECTION:
            return type(link).__name__
    if isinstance(exc, (e.OfflineModeIsEnabled, e.LocalEntryNotFoundError)):
        # Not the network: say what the client met (an answer it could not use, say).
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__
    return None


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def _not_cached(need: Need, why: str) -> str:
    remedy = "unset HF_HUB_OFFLINE, or " if offline() else ""
    return (
        f"{need.flag}: {need.kind} '{need.name}' is not in the Hugging Face cache ({hf_hub_cache()}) and {why}; "
        f"{remedy}run `prl fetch @ <config>` where the hub is reachable, with the same HF_HUB_CACHE"
    )


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _at(need: Need) -> str:
    return f"@{need.revision}" if need.revision else ""


def human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
