"""Client settings from a URL or the environment (clients/vectors/CONFIG.md).

Parsing only: nothing here connects, and nothing depends on a client class, so the threaded
:class:`idgen_client.Client` and any other client of this package build from the same
:class:`Settings`::

    settings = parse_url("idgens://n1:7420,n2:7420?ca=/etc/idgen/ca.crt&timeout_ms=500")
    settings = Settings.from_env()          # IDGEN_NODES and IDGEN_CLIENT_*
    kwargs = settings.merge({"prefetch": 1000})   # constructor keyword arguments

Every mistake raises :class:`ConfigError` (a ``ValueError``) naming what is wrong.
"""

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

__all__ = ["ConfigError", "Settings", "parse_url", "DEFAULT_PORT", "ENV_NODES", "ENV_CLIENT"]

#: The port of a node given without one.
DEFAULT_PORT = 7420
#: Timeouts in a URL or the environment: integer milliseconds in this range.
MAX_TIMEOUT_MS = 3_600_000

ENV_NODES = "IDGEN_NODES"
#: The ``IDGEN_CLIENT_*`` variables and the setting each one gives (plain list only).
ENV_CLIENT: Dict[str, str] = {
    "IDGEN_CLIENT_CA": "ca",
    "IDGEN_CLIENT_CERT": "cert",
    "IDGEN_CLIENT_KEY": "key",
    "IDGEN_CLIENT_SERVER_NAME": "server_name",
    "IDGEN_CLIENT_CONNECT_TIMEOUT_MS": "connect_timeout_ms",
    "IDGEN_CLIENT_TIMEOUT_MS": "timeout_ms",
}

_SCHEMES = {"idgen": False, "idgens": True}
_TLS_PARAMS = ("ca", "cert", "key", "server_name")
_PARAMS = _TLS_PARAMS + ("connect_timeout_ms", "timeout_ms", "expand")
# What a host may not contain (it is never percent-decoded).
_BAD_HOST = re.compile(r"[\s/?#@\[\]%,\\]")

# Setting -> the client's constructor keyword argument it becomes.
_KWARG = {
    "ca": "tls_ca",
    "cert": "tls_cert",
    "key": "tls_key",
    "server_name": "server_hostname",
    "connect_timeout_ms": "connect_timeout",
    "timeout_ms": "timeout",
    "expand": "expand",
}
# Code options that configure TLS: a plain idgen:// URL and these do not go together.
_TLS_KWARGS = ("tls", "tls_ca", "tls_cert", "tls_key", "server_hostname", "ssl_context")


class ConfigError(ValueError):
    """A URL, an environment or a combination of settings that cannot be used: the message
    says what is wrong. Raised before any connection."""


@dataclass(frozen=True)
class Settings:
    """Parsed client settings: the nodes (``host:port``, IPv6 in brackets, in the order
    given), TLS on or off, the TLS files and name, the timeouts in milliseconds (``None``: the
    client's default) and ``expand``. ``source`` says where they came from ("the URL" or
    "the environment"), for error messages."""

    nodes: Tuple[str, ...]
    tls: bool = False
    ca: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    server_name: Optional[str] = None
    connect_timeout_ms: Optional[int] = None
    timeout_ms: Optional[int] = None
    expand: bool = False
    source: str = "the URL"

    @classmethod
    def from_url(cls, url: str) -> "Settings":
        """The settings of an ``idgen://`` or ``idgens://`` URL (see :func:`parse_url`)."""
        return parse_url(url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Settings":
        """The settings of ``IDGEN_NODES`` (a URL or a plain ``host:port,...`` list) and, with
        a plain list, the ``IDGEN_CLIENT_*`` variables. An empty variable counts as unset.
        ``environ`` defaults to ``os.environ``."""
        env = environ

        def get(name: str) -> Optional[str]:
            value = env.get(name)
            return value if value else None

        nodes = get(ENV_NODES)
        if nodes is None:
            state = "empty" if ENV_NODES in env else "not set"
            raise ConfigError(
                f"{ENV_NODES} is {state}: set it to the nodes, 'host:port,host:port' or an "
                "idgen:// / idgens:// URL"
            )
        client_vars = {name: get(name) for name in ENV_CLIENT}
        given = sorted(name for name, value in client_vars.items() if value is not None)
        if "://" in nodes:
            if given:
                raise ConfigError(
                    f"{ENV_NODES} is a URL and {', '.join(given)} set too: each setting has "
                    f"one source (put it in the URL, or give {ENV_NODES} as a plain list)"
                )
            return _replace_source(parse_url(nodes, what=ENV_NODES), "the environment")
        entries = [entry.strip() for entry in nodes.split(",")]
        parsed = _node_list(entries, ENV_NODES)
        ca, cert, key, server_name = (
            client_vars["IDGEN_CLIENT_CA"],
            client_vars["IDGEN_CLIENT_CERT"],
            client_vars["IDGEN_CLIENT_KEY"],
            client_vars["IDGEN_CLIENT_SERVER_NAME"],
        )
        _cert_and_key(cert, key, "IDGEN_CLIENT_CERT", "IDGEN_CLIENT_KEY")
        ct = client_vars["IDGEN_CLIENT_CONNECT_TIMEOUT_MS"]
        t = client_vars["IDGEN_CLIENT_TIMEOUT_MS"]
        return cls(
            nodes=parsed,
            tls=any(v is not None for v in (ca, cert, key, server_name)),
            ca=ca,
            cert=cert,
            key=key,
            server_name=server_name,
            connect_timeout_ms=None if ct is None else _timeout(ct, "IDGEN_CLIENT_CONNECT_TIMEOUT_MS"),
            timeout_ms=None if t is None else _timeout(t, "IDGEN_CLIENT_TIMEOUT_MS"),
            source="the environment",
        )

    def client_kwargs(self) -> Dict[str, object]:
        """The client constructor's keyword arguments for these settings: ``nodes`` and only
        what was given (``tls``, ``tls_ca``, ``tls_cert``, ``tls_key``, ``server_hostname``,
        ``connect_timeout``/``timeout`` in seconds, ``expand``)."""
        out: Dict[str, object] = {"nodes": list(self.nodes)}
        if self.tls:
            out["tls"] = True
        for setting, kwarg in _KWARG.items():
            value = getattr(self, setting)
            if value is None or value is False:
                continue
            out[kwarg] = value / 1000.0 if setting.endswith("timeout_ms") else value
        return out

    def merge(self, code: Mapping[str, object]) -> Dict[str, object]:
        """:meth:`client_kwargs` together with settings given in code (``prefetch=``,
        ``hooks=``, ...). A setting given both ways is a :class:`ConfigError`, never a silent
        precedence; so are ``nodes`` in code, and TLS options in code next to a plain
        ``idgen://`` URL."""
        own = self.client_kwargs()
        if "nodes" in code:
            raise ConfigError(f"the nodes come from {self.source}: do not pass nodes= too")
        both = sorted(k for k in code if k in own)
        if both:
            names = {kwarg: setting for setting, kwarg in _KWARG.items()}
            said = ", ".join(f"{k}= ({names.get(k, 'the idgens:// scheme')})" for k in both)
            raise ConfigError(f"given both in code and in {self.source}: {said}")
        if not self.tls and self.source == "the URL":
            tls_code = sorted(k for k in code if k in _TLS_KWARGS)
            if tls_code:
                raise ConfigError(
                    f"{', '.join(k + '=' for k in tls_code)} given in code for a plain "
                    "idgen:// URL: use idgens://"
                )
        merged = dict(own)
        merged.update(code)
        return merged


def parse_url(url: str, *, what: str = "URL") -> Settings:
    """Parse ``idgen://NODES[/][?PARAMS]`` (plain TCP) or ``idgens://...`` (TLS): nodes
    ``host[:port]`` or ``[v6]:port`` (port default 7420), parameters ``ca``, ``cert``,
    ``key``, ``server_name`` (``idgens`` only), ``connect_timeout_ms``, ``timeout_ms``,
    ``expand``. Raises :class:`ConfigError` naming what is wrong (clients/vectors/CONFIG.md)."""
    if not isinstance(url, str):
        raise TypeError(f"the {what} is a str, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError(f"{what} {url!r} has no scheme: it starts with idgen:// or idgens://")
    if scheme not in _SCHEMES:
        if scheme.lower() in _SCHEMES:
            raise ConfigError(f"{what} {url!r}: the scheme is lower case ({scheme.lower()}://)")
        raise ConfigError(
            f"{what} {url!r}: scheme {scheme!r} is not idgen:// (plain) or idgens:// (TLS)"
        )
    tls = _SCHEMES[scheme]
    if "#" in rest:
        raise ConfigError(f"{what} {url!r}: a fragment ('#...') has no meaning here")
    rest, has_query, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    if slash and path:
        raise ConfigError(f"{what} {url!r}: a path ('/{path}') has no meaning here, only '/'")
    if "@" in authority:
        raise ConfigError(
            f"{what} {url!r}: user info ('...@') has no meaning here (a URL holds no secrets)"
        )
    if not authority:
        raise ConfigError(f"{what} {url!r}: no node")
    nodes = _node_list(authority.split(","), what)
    params: Dict[str, str] = {}
    if has_query:
        for item in query.split("&"):
            name, eq, raw = item.partition("=")
            if not eq:
                raise ConfigError(f"{what}: parameter {item!r} has no '=value'")
            name = urllib.parse.unquote(name)
            if name not in _PARAMS:
                raise ConfigError(
                    f"{what}: unknown parameter {name!r} (known: {', '.join(_PARAMS)})"
                )
            if name in params:
                raise ConfigError(f"{what}: parameter {name!r} given twice")
            value = urllib.parse.unquote(raw, errors="strict")
            if not value:
                raise ConfigError(f"{what}: parameter {name!r} is empty")
            params[name] = value
    if not tls:
        given = [p for p in _TLS_PARAMS if p in params]
        if given:
            raise ConfigError(
                f"{what}: {', '.join(given)} is a TLS parameter, in an idgen:// (plain) URL: "
                "use idgens://"
            )
    _cert_and_key(params.get("cert"), params.get("key"), "cert", "key")
    expand = params.get("expand", "false")
    if expand not in ("true", "false"):
        raise ConfigError(f"{what}: expand is 'true' or 'false', not {expand!r}")
    ct = params.get("connect_timeout_ms")
    t = params.get("timeout_ms")
    return Settings(
        nodes=nodes,
        tls=tls,
        ca=params.get("ca"),
        cert=params.get("cert"),
        key=params.get("key"),
        server_name=params.get("server_name"),
        connect_timeout_ms=None if ct is None else _timeout(ct, "connect_timeout_ms"),
        timeout_ms=None if t is None else _timeout(t, "timeout_ms"),
        expand=expand == "true",
    )


def split_node(node: str) -> Tuple[str, int]:
    """``host:port`` / ``[v6]:port`` (as :class:`Settings` gives them) -> ``(host, port)``,
    the host without brackets."""
    host, _, port = node.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _replace_source(settings: Settings, source: str) -> Settings:
    return Settings(**{**settings.__dict__, "source": source})


def _node_list(entries: List[str], what: str) -> Tuple[str, ...]:
    out: List[str] = []
    for i, entry in enumerate(entries):
        if not entry:
            where = "last" if i == len(entries) - 1 and i else f"number {i + 1}"
            raise ConfigError(f"{what}: node entry {where} is empty")
        node = _node(entry, what)
        if node in out:
            raise ConfigError(f"{what}: node {node} is listed twice")
        out.append(node)
    if not out:
        raise ConfigError(f"{what}: no node")
    return tuple(out)


def _node(entry: str, what: str) -> str:
    """``host[:port]`` or ``[v6][:port]`` -> ``host:port`` / ``[v6]:port``."""
    if entry.startswith("["):
        end = entry.find("]")
        if end < 0:
            raise ConfigError(f"{what}: node {entry!r} has an unclosed '['")
        host = entry[1:end]
        after = entry[end + 1 :]
        if not host or ":" not in host or _BAD_HOST.search(host.replace("%", "")):
            raise ConfigError(f"{what}: node {entry!r}: '[...]' holds an IPv6 address")
        if after and not after.startswith(":"):
            raise ConfigError(f"{what}: node {entry!r}: after ']' comes ':port' or nothing")
        port_text: Optional[str] = after[1:] if after else None
        shown = f"[{host}]"
    else:
        host, colon, port = entry.partition(":")
        if ":" in port:
            raise ConfigError(
                f"{what}: node {entry!r}: an IPv6 address goes in brackets, '[{entry}]:port'"
            )
        if not host:
            raise ConfigError(f"{what}: node {entry!r} has no host")
        if _BAD_HOST.search(host):
            raise ConfigError(f"{what}: node {entry!r}: the host {host!r} is not a host name")
        port_text = port if colon else None
        shown = host
    if port_text is None:
        return f"{shown}:{DEFAULT_PORT}"
    if not port_text:
        raise ConfigError(f"{what}: node {entry!r} has an empty port")
    if not port_text.isascii() or not port_text.isdigit():
        raise ConfigError(f"{what}: node {entry!r}: the port {port_text!r} is not a number")
    number = int(port_text)
    if not 1 <= number <= 65535:
        raise ConfigError(f"{what}: node {entry!r}: the port {number} is not in 1..=65535")
    return f"{shown}:{number}"


def _timeout(value: str, name: str) -> int:
    if not value.isascii() or not value.isdigit():
        raise ConfigError(
            f"{name} is a whole number of milliseconds in 1..={MAX_TIMEOUT_MS}, not {value!r}"
        )
    ms = int(value)
    if not 1 <= ms <= MAX_TIMEOUT_MS:
        raise ConfigError(f"{name} {ms} is not in 1..={MAX_TIMEOUT_MS} milliseconds")
    return ms


def _cert_and_key(cert: Optional[str], key: Optional[str], cert_name: str, key_name: str) -> None:
    if cert is not None and key is None:
        raise ConfigError(f"{cert_name} is given without {key_name}: a client certificate needs both")
    if key is not None and cert is None:
        raise ConfigError(f"{key_name} is given without {cert_name}: a client certificate needs both")
