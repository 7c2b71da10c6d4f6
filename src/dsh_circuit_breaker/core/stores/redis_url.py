"""A `redis://` state URL (and `rediss://`, `+cluster`, `+sentinel`) read into a Redis
client: the node or nodes, credentials, TLS settings and our own parameters, each checked
at load so that a typo fails loudly instead of merging two fleets' state."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from redis.connection import parse_url

from ..config import ConfigError
from .redis_client import DEFAULT_RETRY_AFTER, Address, RedisClient
from .redis_topology import Cluster, Sentinel, Single

# Our own URL query parameters.
_OWN_PARAMS = ("prefix", "retry_after")
# The TLS settings passed on to redis-py, for rediss:// only. Nothing else is: any other
# connection option either spends the budget in round trips of its own (client_name) or
# changes what a decision means; an unknown name is a typo, and a ConfigError.
_TLS_PARAMS = (
    "ssl_ca_certs", "ssl_ca_path", "ssl_ca_data", "ssl_certfile", "ssl_keyfile",
    "ssl_password", "ssl_cert_reqs", "ssl_check_hostname", "ssl_min_version", "ssl_ciphers",
    "ssl_include_verify_flags", "ssl_exclude_verify_flags",
)  # fmt: skip
# Timeouts are ours: one budget per call, not per socket operation.
_NOT_ALLOWED = ("socket_timeout", "socket_connect_timeout", "timeout", "retry_on_timeout")


def client_from_url(url: str, budget: float) -> tuple[RedisClient, str | None]:
    """`redis://[[user]:password@]host[:port][/db][?prefix=...&retry_after=5]`, or `rediss://`;
    a cluster: `redis+cluster://[[user]:password@]host:port[,host:port...]`; behind
    Sentinel: `redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]`
    (the sentinels' addresses; the password is the master's). The spellings `limits` and
    other clients use; `rediss+cluster://` and `rediss+sentinel://` for TLS.

    Without a password in the URL, REDIS_PASSWORD is used when set. rediss also takes
    redis-py's TLS settings (`ssl_ca_certs`, `ssl_cert_reqs`, ...; see _TLS_PARAMS).
    The client, and the `prefix` parameter (the store's) when given.
    """
    parts = urlsplit(url)
    scheme, _, mode = parts.scheme.partition("+")
    if mode not in ("", "cluster", "sentinel"):
        raise ConfigError(f"state URL {_redact(url)!r}: unknown scheme {parts.scheme!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    _check_params([name for name, _ in query], scheme)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    db = parts.path.strip("/")
    service = ""
    if mode == "sentinel":
        service, _, db = db.partition("/")
        if not service:
            raise ConfigError(
                f"state URL {_redact(url)!r} names no service: "
                "redis+sentinel://host:26379[,host:26379...]/SERVICE[/db]"
            )
    if db and not db.isdigit():
        # redis-py would quietly use database 0: a typo must not merge two fleets' state.
        raise ConfigError(f"state URL {_redact(url)!r}: the path must be a database number")
    if mode == "cluster" and db not in ("", "0"):
        raise ConfigError(f"state URL {_redact(url)!r}: a cluster has database 0 only")
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    try:
        addresses = [_address(h, 26379 if mode == "sentinel" else 6379) for h in hosts.split(",")]
        # redis-py reads credentials and TLS settings from a plain URL of the first node.
        first = hosts.split(",")[0]
        plain = (scheme, userinfo + at + first, "/" + db if db else "", urlencode(rest), "")
        kwargs = parse_url(urlunsplit(plain))  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ConfigError(f"state URL {_redact(url)!r}: {exc}") from None
    try:
        retry_after = float(own.get("retry_after", DEFAULT_RETRY_AFTER))
    except ValueError:
        raise ConfigError("state URL: retry_after must be a number of seconds") from None
    if not 0 <= retry_after <= 3600:  # also refuses nan and inf
        raise ConfigError("state URL: retry_after must be 0 to 3600 seconds")
    topology: Single | Cluster | Sentinel | None = None
    if mode == "cluster":
        topology = Cluster(addresses)
    elif mode == "sentinel":
        topology = Sentinel(addresses, unquote(service))
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    shown = hosts if mode else f"{host}:{port}"
    where = f"{parts.scheme} at {shown}"
    client = RedisClient(kwargs, budget, retry_after=retry_after, where=where, topology=topology)
    return client, own.get("prefix")


def _address(text: str, default_port: int) -> Address:
    """`host:port`, `host` or `[v6]:port`."""
    host, colon, port = text.rpartition(":")
    if not colon or host.endswith(":"):  # no port, or a bare IPv6 address
        host, port = text, str(default_port)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port")
    return host, int(port)


def _check_params(names: list[str], scheme: str) -> None:
    for name in names:
        if name in _NOT_ALLOWED:
            raise ConfigError(
                f"state URL: {name} is not accepted; the budget is the config key storeTimeout"
            )
        if name in _TLS_PARAMS and scheme != "rediss":
            raise ConfigError(f"state URL: {name} is a TLS setting; it needs rediss://")
        if name not in _OWN_PARAMS and name not in _TLS_PARAMS:
            known = ", ".join(_OWN_PARAMS + (_TLS_PARAMS if scheme == "rediss" else ()))
            raise ConfigError(f"state URL: unknown parameter {name[:100]!r} (known: {known})")
    if len(set(names)) < len(names):
        raise ConfigError("state URL: a parameter is given twice")


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))
