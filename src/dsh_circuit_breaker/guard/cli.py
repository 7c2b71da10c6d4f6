"""`dsh-circuit-breaker serve`: the resident guard, over stdio (`stdio`, the JavaScript
plugins' guard) or HTTP (`http`, with `--ensure` and `--stop` in `ensure`). Imported by
`serve`'s parser, so it imports none of them until run."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from ..core.config_file import ENV_TOKEN


def add_arguments(parser: argparse.ArgumentParser) -> None:
    transport = parser.add_mutually_exclusive_group(required=True)
    transport.add_argument(
        "--stdio",
        action="store_true",
        help="speak newline-delimited JSON on stdin/stdout (a harness plugin's guard)",
    )
    transport.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        help="answer HTTP hooks, the live page and /metrics (loopback by default)",
    )
    parser.add_argument(
        "--config-json",
        default=None,
        metavar="JSON",
        help="--stdio: breaker config as a JSON object (camelCase keys); a `hello` replaces it",
    )
    parser.add_argument("--state", default=None, metavar="URL", help="state store URL")
    group = parser.add_argument_group("HTTP guard (--http)")
    group.add_argument("--config", metavar="FILE", help="config file (as the hook reads it)")
    group.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"the token every request must carry (default: ${ENV_TOKEN}, else a "
        "random one created at first start in the state directory)",
    )
    group.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback address (then --tls-cert and --tls-key are required)",
    )
    group.add_argument("--tls-cert", metavar="FILE", help="TLS certificate chain (PEM)")
    group.add_argument("--tls-key", metavar="FILE", help="TLS private key (PEM)")
    group.add_argument(
        "--ensure",
        action="store_true",
        help="start the service in the background unless it already answers, then exit "
        "(what the SessionStart hook of `install ... --http` runs)",
    )
    group.add_argument(
        "--stop",
        action="store_true",
        help="stop the service that answers on this address with this token, then exit",
    )


def build(args: argparse.Namespace) -> Any:
    """The server `serve --http` runs, bound and ready; ConfigError, ValueError or
    OSError say what is wrong."""
    from .. import token as tokens
    from .http import GuardHTTPServer
    from .service import Guard

    host, port, tls, loopback = listening(args)
    token = tokens.resolve(args.token)
    guard = Guard(args.config, args.state)
    try:
        # A remote service is reached by names this process cannot know: there TLS stops
        # a rebinding page (its certificate would not match), the token everything else.
        return GuardHTTPServer((host, port), guard, token, tls=tls, check_host=loopback)
    except BaseException:
        guard.close()
        raise


def listening(args: argparse.Namespace) -> tuple[str, int, Any, bool]:
    """Where `--http` listens: (host, port, the TLS context or None, loopback?). A
    non-loopback address needs --allow-remote and TLS (also `mcp --http`'s rule)."""
    import ssl

    from ..address import is_loopback, parse_address
    from ..core.config import ConfigError

    host, port = parse_address(args.http)
    loopback = is_loopback(host)
    if not loopback and not args.allow_remote:
        raise ConfigError(
            f"--http {args.http}: {host} is not a loopback address; the guard answers "
            "on this machine only unless --allow-remote is given (with TLS)"
        )
    tls = None
    if args.tls_cert or args.tls_key or not loopback:
        if not (args.tls_cert and args.tls_key):
            raise ConfigError(
                "--allow-remote needs --tls-cert and --tls-key: the token and every tool "
                "call's arguments would otherwise cross the network in clear text"
            )
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.minimum_version = ssl.TLSVersion.TLSv1_2
        _check_key(args.tls_key)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    return host, port, tls, loopback


def run(args: argparse.Namespace) -> int:
    if args.http is None:
        from . import stdio

        return stdio.run(args.config_json, args.state)
    import logging

    from ..core.config import ConfigError
    from ..usage import PREFIX, error, os_error

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    if args.config_json:
        return error("serve --http: --config-json is --stdio's; use --config FILE")
    if args.ensure or args.stop:
        from . import ensure

        return ensure.ensure(args) if args.ensure else ensure.stop(args)
    try:
        server = build(args)
    except OSError as exc:  # ssl.SSLError among them
        return error(f"serve --http {args.http}: {os_error(exc)}")
    except (ConfigError, ValueError) as exc:
        return error(f"serve --http {args.http}: {exc}")
    from .._version import __version__
    from ..address import page_url
    from .service import redacted

    if args.token:
        print(
            "dsh-circuit-breaker serve: --token is visible to every user of this machine "
            f"(ps, /proc/PID/cmdline); prefer ${ENV_TOKEN} or the token file",
            file=sys.stderr,
        )
    warning = server.guard.open()
    if warning:
        print(f"{PREFIX}serve: {warning}", file=sys.stderr)
    print(
        f"dsh-circuit-breaker {__version__}: guarding on {server.origin} "
        f"(state: {redacted(server.guard.url)}, pid {os.getpid()})\n"
        f"  the live page: {page_url(server.origin, server.token.decode())}",
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: server.shutdown())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.guard.close()
    return 0


def _check_key(path: str) -> None:
    """A TLS private key that every user may read is no secret: refused, naming it."""
    import stat

    from ..core.config import ConfigError

    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError as exc:
        raise ConfigError(f"--tls-key {path}: {exc.strerror or exc}") from None
    if mode & 0o004:
        raise ConfigError(
            f"--tls-key {path}: readable by every user (mode {mode:o}); chmod 600 {path}"
        )
