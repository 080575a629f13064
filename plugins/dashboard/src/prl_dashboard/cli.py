"""``prl dashboard [output_dir ...] [--host H] [--port P]``.

Serves the dashboard over the given output directories (default ``$PRL_OUTPUT_DIR``, else
``outputs``) on ``127.0.0.1:7788``. A taken port moves the server to the next free one, up
to :data:`PORT_TRIES` ports; an explicit ``--port`` is used as given. Bad flags and missing
directories are one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from prl.cli.errors import USAGE_EXIT

DEFAULT_PORT = 7788
PORT_TRIES = 100


class UsageError(Exception):
    """A bad command line: printed as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print usage and exit itself
        raise UsageError(message)


def _parser() -> _Parser:
    parser = _Parser(prog="prl dashboard", description="Local read-only dashboard over prl run directories.")
    parser.add_argument(
        "output_dirs", nargs="*", type=Path, help="output directories (default: $PRL_OUTPUT_DIR or outputs)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help=f"port (default {DEFAULT_PORT}, else the next free one)")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    args = _parser().parse_args(argv)
    if args.port is not None and not 0 <= args.port <= 65535:
        raise UsageError(f"--port: {args.port} is not a port number (0-65535)")
    if not args.output_dirs:
        args.output_dirs = [Path(os.environ.get("PRL_OUTPUT_DIR") or "outputs")]
    for path in args.output_dirs:
        if not path.is_dir():
            raise UsageError(f"output_dir: {path} is not a directory")
    return args


def bind(roots: list[Path], host: str, port: int | None):
    """The server on ``port``, or on the first free port from 7788 when ``port`` is None."""
    from prl_dashboard.server import make_server

    candidates = [port] if port is not None else range(DEFAULT_PORT, DEFAULT_PORT + PORT_TRIES)
    last: OSError | None = None
    for candidate in candidates:
        try:
            return make_server(roots, host, candidate)
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise UsageError(f"--host: cannot bind {host}:{candidate}: {exc.strerror}") from None
            last = exc
    tried = f"port {port}" if port is not None else f"ports {DEFAULT_PORT}-{DEFAULT_PORT + PORT_TRIES - 1}"
    raise UsageError(f"--port: {tried} on {host} not free ({last.strerror if last else 'in use'})")


def main(argv: list[str] | None = None) -> int:
    """Entry of ``prl dashboard``; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(_parser().format_help())
        return 0
    try:
        args = parse(argv)
        server = bind([p.resolve() for p in args.output_dirs], args.host, args.port)
    except UsageError as exc:
        print(f"prl dashboard: error: {exc}", file=sys.stderr)
        return USAGE_EXIT
    host, port = server.server_address[:2]
    shown = "localhost" if host == "127.0.0.1" else host
    dirs = ", ".join(str(p) for p in args.output_dirs)
    print(f"Dashboard · http://{shown}:{port} (runs under {dirs}; Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
