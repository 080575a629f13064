"""What every inference backend does around its HTTP app: refuse to expose admin routes
without a key, bind the socket first (port 0 picks a free one), then announce the URL."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from typing import TYPE_CHECKING, Any

from prl.config.errors import HostError
from prl.fsutil import write_atomic

if TYPE_CHECKING:
    from prl.config.components import InferenceConfig


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def admin_api_key(server: Any) -> str | None:
    """``server.api_key`` or ``$PRL_API_KEY``; a non-loopback bind without one is refused."""
    api_key = server.api_key or os.environ.get("PRL_API_KEY") or None
    if not is_loopback(server.host) and not api_key:
        raise SystemExit(
            f"server.host '{server.host}' is not loopback: set server.api_key (or $PRL_API_KEY) "
            "so admin routes are protected"
        )
    return api_key


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise HostError(
                f"server.port {port} on {host} is already in use by another process; "
                "stop it or choose another port (server.port = 0 picks a free one)"
            ) from None
        raise HostError(f"cannot bind server.host:port {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def check_port_free(host: str, port: int, flag: str) -> None:
    """Before a server is started: a fixed ``port`` that is taken on ``host`` is a one-line
    HostError naming ``flag``. Bound and closed here, so a backend that binds elsewhere
    (vLLM, an engine behind the router) fails before it loads anything, not after."""
    if not port:
        return  # 0: the server picks a free one
    try:
        bind(host, port).close()
    except HostError as exc:
        if "already in use" not in exc.message:
            raise HostError(f"{flag} {port}: {exc.message}") from None
        raise HostError(
            f"{flag} {port}: port {port} on {host} is already in use; stop the process that holds it "
            f"or choose another port ({flag} 0 picks a free one)"
        ) from None


def inference_ports_free(inference: InferenceConfig, prefix: str = "") -> None:
    """``check_port_free`` for the ports a managed inference server binds: ``server.port``
    and, behind a router, the engines' fixed ``backend_port + i`` on loopback."""
    server = inference.server
    check_port_free(server.host, server.port, f"--{prefix}server.port")
    if (server.engines or 1) > 1 and server.backend_port:
        for i in range(server.engines):
            check_port_free("127.0.0.1", server.backend_port + i, f"--{prefix}server.backend-port")


# Ports picked ahead of their server (the clients must know them first) are drawn from
# outside the kernel's ephemeral range: every bind to port 0 and every outgoing connection
# on this machine takes its port from that range, so a port picked there can be handed to
# another process before its server binds it (seen on busy test machines).
_PICK_FLOOR = 15000  # below: ports that fixed-port services tend to claim
_PICK_TRIES = 64


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's ephemeral range (Linux: ip_local_port_range; elsewhere the IANA one)."""
    try:
        lo, hi = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 49152, 65535


def _candidates() -> list[int]:
    lo, hi = ephemeral_ports()
    return [*range(_PICK_FLOOR, min(lo, 65536)), *range(max(hi + 1, _PICK_FLOOR), 65536)]


def free_port(host: str) -> int:
    """A port free on ``host`` right now, for a managed server whose clients must know it
    before it starts (a server given port 0 would pick its own, unknown to them). Drawn at
    random (system entropy, so processes seeded alike do not draw alike) from outside the
    ephemeral range; where the kernel leaves no room outside it, any free port."""
    import random

    pool, draw = _candidates(), random.SystemRandom()
    for _ in range(_PICK_TRIES if len(pool) >= 1000 else 0):
        port = draw.choice(pool)
        if port in _HANDED_OUT:
            continue
        try:
            bind(host, port).close()
        except HostError:
            continue
        return _hand_out(port)
    sock = bind(host, 0)
    try:
        return _hand_out(sock.getsockname()[1])
    finally:
        sock.close()


# Ports this process picked ahead: none is picked twice, since the server of an earlier pick
# (the engines behind a router, the inference port then the NCCL port) may not listen yet.
_HANDED_OUT: set[int] = set()


def _hand_out(port: int) -> int:
    _HANDED_OUT.add(port)
    return port


def free_listen_port(host: str) -> int:
    """A port free where a server reached at ``host`` listens: loopback for a loopback
    host, every interface otherwise (``host`` may name this machine to others)."""
    return free_port("127.0.0.1" if is_loopback(host) else "0.0.0.0")


def ready_file(config: InferenceConfig) -> str | os.PathLike | None:
    """Where to write the bound URL: server.ready_file, the backend's, or $PRL_READY_FILE."""
    return config.server.ready_file or getattr(config.backend, "ready_file", None) or os.environ.get("PRL_READY_FILE")


def announce(sock: socket.socket, ready: str | os.PathLike | None) -> str:
    """Print ``listening on <url>`` and write the URL to ``ready`` (once serving)."""
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    print(f"listening on {url}", flush=True)
    if ready:
        write_atomic(ready, url + "\n")
    return url


def serve_main(argv: list[str] | None, module: str, backend_cls: Any) -> int:
    """``python -m <module> <resolved inference.json>``: serve one resolved config with
    ``backend_cls`` until stopped."""
    import sys
    from pathlib import Path

    from prl.config.components import InferenceConfig

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} <resolved inference.json>", file=sys.stderr)
        return 2
    backend_cls(InferenceConfig.model_validate_json(Path(args[0]).read_text())).serve()
    return 0


# After SIGTERM uvicorn stops accepting, then waits this long for open connections before
# cancelling their handlers: a request stuck on a peer (a trainer that never sends) must
# not keep a launcher's or SLURM's stop waiting.
SHUTDOWN_GRACE_S = 3.0

ERROR_DESCRIPTIONS = {
    400: "Bad request: a value out of range, malformed JSON, or a check against the model failed",
    401: "Admin route without 'Authorization: Bearer <server.api_key>'",
    404: "The model (or adapter) named is not served here",
    413: "Request body over server.limits.max_body_bytes",
    500: "The engine failed while serving the request",
    501: "This feature needs a plugin that is not installed",
    502: "The trainer's weight-broadcast group could not be joined (unreachable, refused)",
    503: "Server busy (token budget queue full; see Retry-After) or shutting down",
    504: "An admin wait ran past server.admin_timeout",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses=`` declaring each error status with the shared error body."""
    from prl.contracts.http import ErrorBody

    return {code: {"model": ErrorBody, "description": ERROR_DESCRIPTIONS[code]} for code in codes}


def openapi_as_served(app: Any, patch: Any = None) -> None:
    """Make ``app``'s OpenAPI document say what the server answers: FastAPI lists a 422 for
    every route with a body, but these servers answer bad input with 400 (declared per route
    through :func:`error_responses`); ``patch(schema)`` may add what only the running server
    knows (the vocabulary size, the configured limits)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for item in schema.get("paths", {}).values():
                for operation in item.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            if patch is not None:
                patch(schema)
        return app.openapi_schema

    app.openapi = openapi
