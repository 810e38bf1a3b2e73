"""Exceptions raised by the idgen client.

Hierarchy::

    IdgenError
     +-- ProtocolError        the server sent something that breaks the protocol
     +-- ServerError          the server answered with an ERROR frame
     +-- SequencesUnsupportedError  a named-sequence call on a node below protocol version 3
     +-- UnavailableError     transport failure: refused, reset, closed, timed out
     |    +-- NoNodeAvailable every node failed or is backing off
     |    +-- TLSError        the TLS handshake failed (certificate, name, client certificate)
     +-- ClientClosedError    the client was closed

Retrying a failed request on another node is always safe: a server never sends an ID twice,
so a request that failed (or timed out) leaves at most a gap, never a duplicate.
"""

from typing import Dict, Optional

from . import status as _status

__all__ = [
    "IdgenError",
    "ProtocolError",
    "ServerError",
    "UnavailableError",
    "NoNodeAvailable",
    "TLSError",
    "ClientClosedError",
    "SequencesUnsupportedError",
]


class IdgenError(Exception):
    """Base class of every error this package raises (except ValueError/TypeError for bad
    arguments and the ValueError subclasses of :mod:`idgen_client.forms`)."""


class ProtocolError(IdgenError):
    """The server sent a malformed frame, or a well-formed frame that does not answer the
    request it stands for. The connection is dropped and the node marked down.

    ``status`` is the wire status of a framing fault (100 BAD_FRAME, 101 FRAME_TOO_LARGE),
    or ``None`` for an answer that does not fit its request.
    """

    def __init__(self, message: str, status: Optional[int] = None, node: Optional[str] = None):
        self.status = status
        self.node = node
        prefix = f"{node}: " if node else ""
        super().__init__(f"{prefix}protocol error: {message}")
        self.detail = message


class ServerError(IdgenError):
    """The server answered with an ERROR frame.

    Act on ``status`` only; ``message`` is for humans. ``name`` is the status name
    (``None`` for a code this client does not know). ``retry_elsewhere`` is true for
    ``3xx`` except ``304 EXHAUSTED`` and ``307 SEQUENCE_USED_UP``; ``closes_connection`` says
    whether the server closes the connection after it (PROTOCOL.md section 5).

    Named sequences raise it with ``203 UNKNOWN_SEQUENCE``, ``204 INVALID_SEQUENCE_NAME``,
    ``307 SEQUENCE_USED_UP`` (at once, no other node tried), and ``308
    SEQUENCE_UNAVAILABLE`` once failover has found no node that could reserve values.
    """

    def __init__(self, status: int, name: Optional[str], message: str, node: Optional[str] = None):
        self.status = status
        self.name = name
        self.message = message
        self.node = node
        self.retry_elsewhere = _status.retry_elsewhere(status)
        self.closes_connection = _status.closes_connection(status)
        prefix = f"{node}: " if node else ""
        super().__init__(f"{prefix}server error {status} {name or 'UNKNOWN'}: {message}")


class UnavailableError(IdgenError):
    """A node could not be reached or stopped answering: connection refused or reset, the
    server closed the connection with the request unanswered, or no answer in time."""

    def __init__(self, message: str, node: Optional[str] = None):
        self.node = node
        prefix = f"{node}: " if node else ""
        super().__init__(f"{prefix}{message}")


class NoNodeAvailable(UnavailableError):
    """No node could serve the call. ``errors`` maps every node (``"host:port"``) to its last
    error (an exception, or ``None`` for a node never tried); ``retry_in`` maps a node that is
    backing off to the seconds left before it is tried again."""

    def __init__(self, errors: Dict[str, Optional[BaseException]], retry_in: Dict[str, float]):
        self.errors = dict(errors)
        self.retry_in = dict(retry_in)
        parts = []
        for node, err in self.errors.items():
            text = f"{node}: {err!s}" if err is not None else f"{node}: no error recorded"
            if node in self.retry_in:
                text += f" (down, retried in {self.retry_in[node]:.2f}s)"
            parts.append(text)
        super().__init__("no idgen node available; " + "; ".join(parts))


class TLSError(UnavailableError):
    """The TLS connection to a node failed. A node fault like any other
    :class:`UnavailableError`: the client marks the node down and fails over.

    ``kind`` names the cause:

    * ``"unknown_issuer"``: the server's certificate does not chain to the CA bundle;
    * ``"name_mismatch"``: it does not name the server name (the node's host, or
      ``server_hostname``);
    * ``"expired"``, ``"not_yet_valid"``: it is not valid now;
    * ``"bad_certificate"``: it is unacceptable for another reason;
    * ``"client_certificate_required"``: the server requires a client certificate and none
      was sent;
    * ``"client_certificate_rejected"``: the server refused the client certificate;
    * ``"handshake"``: any other failure (e.g. the port does not speak TLS).

    ``reason`` is OpenSSL's reason code (e.g. ``"CERTIFICATE_VERIFY_FAILED"``) and
    ``verify_code`` OpenSSL's verification result for a server certificate that failed.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        node: Optional[str] = None,
        reason: str = "",
        verify_code: Optional[int] = None,
    ):
        self.kind = kind
        self.reason = reason
        self.verify_code = verify_code
        self.detail = message
        super().__init__(f"TLS: {message}", node)


class SequencesUnsupportedError(IdgenError):
    """A named-sequence call (``next_value``/``next_values``) on a node that negotiated
    protocol version 1 or 2, which has no GET_VALUES. Raised before anything is sent, and no
    other node is tried for the call. ``version`` is the node's version, ``required`` 3."""

    def __init__(self, version: int, node: Optional[str] = None, required: int = 3):
        self.version = version
        self.required = required
        self.node = node
        prefix = f"{node}: " if node else ""
        super().__init__(
            f"{prefix}the node speaks protocol version {version}; named sequences need "
            f"version {required} (upgrade the node)"
        )


class UuidsUnsupportedError(IdgenError):
    """A UUID call (``next_uuid``/``next_uuids``) on a node that negotiated protocol version
    1, 2 or 3, which has no GET_UUIDS. Raised before anything is sent, and no other node is
    tried for the call. ``version`` is the node's version, ``required`` 4."""

    def __init__(self, version: int, node: Optional[str] = None, required: int = 4):
        self.version = version
        self.required = required
        self.node = node
        prefix = f"{node}: " if node else ""
        super().__init__(
            f"{prefix}the node speaks protocol version {version}; UUIDs need protocol "
            f"version {required} (upgrade the node)"
        )


class OptionsUnsupportedError(IdgenError):
    """A call with options (``after``, ``idempotency_key``, masked IDs) on a node that
    negotiated a protocol version below 5, which has no GET_IDS_WITH. Raised before anything is
    sent. ``version`` is the node's version, ``required`` 5."""

    def __init__(self, version: int, node: Optional[str] = None, required: int = 5):
        self.version = version
        self.required = required
        self.node = node
        prefix = f"{node}: " if node else ""
        super().__init__(
            f"{prefix}the node speaks protocol version {version}; after, idempotency keys and "
            f"masked IDs need protocol version {required} (upgrade the node)"
        )


class KeyNodeUnavailableError(UnavailableError):
    """A call with an idempotency key whose node (the one :func:`key_node` picks) failed with
    a retry-elsewhere error (a 3xx status, a lost or refused connection). The call is NOT
    retried on another node, which would issue new IDs for the key: retry it later with the
    same key. ``key`` is the key, ``status`` the node's status (``None`` for a connection
    failure), ``node`` the node; the original error is ``__cause__``."""

    def __init__(self, key: str, node: Optional[str], cause: BaseException):
        self.key = key
        self.status: Optional[int] = getattr(cause, "status", None)
        super().__init__(
            f"idempotency key {key!r} goes to node {node} only, which failed ({cause}); "
            f"the call was not retried on another node (that would issue new IDs): "
            f"retry it later with the same key",
            node,
        )


class ClientClosedError(IdgenError):
    """The client (or its connection) was closed by the application."""
