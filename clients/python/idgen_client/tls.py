"""TLS for the client's connections (standard ``ssl`` only).

:func:`make_context` builds the client's ``ssl.SSLContext`` from a CA bundle and an optional
client certificate (mutual TLS): certificate and host name verification on, TLS 1.2 or
newer, ALPN ``idgen/1`` offered.

:class:`TLSSocket` runs TLS over a connected TCP socket with an ``ssl.SSLObject`` on memory
buffers rather than ``SSLContext.wrap_socket``: a connection is read by its reader thread
while callers write to it from theirs, and one OpenSSL connection must not be used by two
threads at once. So every use of the ``SSLObject`` (cheap, in memory) holds one lock, and
the socket I/O happens outside it; the encrypted bytes are taken from the outgoing buffer
and sent under a second lock, so TLS records reach the wire in the order they were made.
It offers what the connection uses of a socket: ``sendall``, ``recv``, ``settimeout``,
``setsockopt``, ``shutdown``, ``close``.
"""

import os
import socket
import ssl
import threading
from typing import Optional, Union

from .errors import TLSError

__all__ = ["ALPN", "make_context", "TLSSocket", "tls_error"]

#: The ALPN protocol name of idgen's binary protocol over TLS.
ALPN = "idgen/1"

_RECV_CHUNK = 65536

PathLike = Union[str, "os.PathLike[str]"]


def make_context(
    ca: PathLike, cert: Optional[PathLike] = None, key: Optional[PathLike] = None
) -> ssl.SSLContext:
    """A client context that trusts the certificates of the PEM file ``ca`` and, with
    ``cert`` and ``key`` (PEM files), presents that client certificate. Raises
    ``ValueError`` naming the file that cannot be used (never a key's content)."""
    if (cert is None) != (key is None):
        raise ValueError("tls_cert and tls_key go together: give both or neither")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_verify_locations(cafile=os.fspath(ca))
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"tls_ca {os.fspath(ca)}: cannot load the CA bundle: {e}") from None
    if not ctx.get_ca_certs():
        raise ValueError(f"tls_ca {os.fspath(ca)}: no CA certificate in the file")
    if cert is not None and key is not None:
        try:
            # An encrypted key would make OpenSSL prompt on the terminal: refuse it instead.
            ctx.load_cert_chain(os.fspath(cert), os.fspath(key), password=_no_password)
        except (OSError, ssl.SSLError, ValueError) as e:
            raise ValueError(
                f"tls_cert {os.fspath(cert)} / tls_key {os.fspath(key)}: cannot load the "
                f"client certificate and key (an encrypted key needs ssl_context=): {e}"
            ) from None
    ctx.set_alpn_protocols([ALPN])
    return ctx


def _no_password() -> bytes:
    raise ValueError("the key is encrypted")


# OpenSSL verification codes (X509_V_ERR_*).
_UNKNOWN_ISSUER = {2, 18, 19, 20, 21}
_NOT_YET_VALID = 9
_EXPIRED = 10
_NAME_MISMATCH = {62, 63, 64}

# Alerts the server sends when it refuses the client's certificate (or its absence).
_CLIENT_CERT_REJECTED = {
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_REVOKED",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV1_ALERT_UNKNOWN_CA",
    "TLSV1_ALERT_ACCESS_DENIED",
}
_NOT_TLS = {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"}


def tls_error(e: ssl.SSLError, node: Optional[str]) -> TLSError:
    """The :class:`TLSError` for an ``ssl`` exception, with its ``kind``."""
    reason = getattr(e, "reason", None) or ""
    if isinstance(e, ssl.SSLCertVerificationError):
        code = e.verify_code
        detail = e.verify_message or str(e)
        if code in _UNKNOWN_ISSUER:
            kind = "unknown_issuer"
            what = "the server's certificate is not signed by a trusted authority (check tls_ca)"
        elif code in _NAME_MISMATCH:
            kind = "name_mismatch"
            what = "the server's certificate is not valid for the server name"
        elif code == _EXPIRED:
            kind, what = "expired", "the server's certificate has expired"
        elif code == _NOT_YET_VALID:
            kind, what = "not_yet_valid", "the server's certificate is not valid yet"
        else:
            kind, what = "bad_certificate", "the server's certificate was rejected"
        return TLSError(kind, f"{what}: {detail}", node, reason=reason, verify_code=code)
    if reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED":
        kind = "client_certificate_required"
        what = "the server requires a client certificate and none was sent"
    elif reason in _CLIENT_CERT_REJECTED:
        kind, what = "client_certificate_rejected", "the server rejected the client certificate"
    elif reason == "TLSV1_ALERT_NO_APPLICATION_PROTOCOL":
        kind, what = "handshake", "the server does not speak the ALPN protocol idgen/1"
    elif reason in _NOT_TLS:
        kind, what = "handshake", "the server did not answer with TLS (is it a plaintext port?)"
    elif isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        kind, what = "handshake", "the server closed the connection during the TLS handshake"
    else:
        kind, what = "handshake", "TLS handshake failed"
    return TLSError(kind, f"{what} ({reason or e})", node, reason=reason)


class TLSSocket:
    """TLS over the connected socket ``raw`` (see the module docstring). ``handshake``
    must complete before any other use."""

    def __init__(self, raw: socket.socket, ctx: ssl.SSLContext, server_hostname: str):
        self._raw = raw
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._obj = ctx.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._ssl_lock = threading.Lock()  # every use of the SSLObject and its buffers
        self._send_lock = threading.Lock()  # taking bytes from _outgoing and sending them

    def handshake(self, timeout: float) -> None:
        """Run the TLS handshake within ``timeout`` seconds (``socket.timeout`` after it);
        ``ssl.SSLError`` if it fails."""
        self._raw.settimeout(timeout)
        while True:
            try:
                with self._ssl_lock:
                    self._obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:
                self._flush_quietly()  # the alert that tells the server why
                raise
            self._flush()
            data = self._raw.recv(_RECV_CHUNK)
            with self._ssl_lock:
                if data:
                    self._incoming.write(data)
                else:
                    self._incoming.write_eof()
        self._flush()

    def selected_alpn_protocol(self) -> Optional[str]:
        return self._obj.selected_alpn_protocol()

    def version(self) -> Optional[str]:
        return self._obj.version()

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            with self._ssl_lock:
                self._obj.write(data)
                out = self._outgoing.read()
            self._raw.sendall(out)

    def recv(self, n: int) -> bytes:
        """Up to ``n`` decrypted bytes; ``b""`` once the server has closed."""
        while True:
            with self._ssl_lock:
                try:
                    data: Optional[bytes] = self._obj.read(n)
                except ssl.SSLWantReadError:
                    data = None
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    data = b""
                pending = self._outgoing.pending
            if pending:
                # The TLS layer has something to send (e.g. an answer to a key update).
                self._flush()
            if data is not None:
                return data
            raw = self._raw.recv(_RECV_CHUNK)
            with self._ssl_lock:
                if raw:
                    self._incoming.write(raw)
                else:
                    self._incoming.write_eof()

    def raise_pending_alert(self, wait: float = 0.2) -> None:
        """After a failed send: raise the ``ssl.SSLError`` of an alert the server sent
        before closing, if one arrives within ``wait`` seconds; else return."""
        try:
            self._raw.settimeout(wait)
            for _ in range(16):  # bounded: an alert is one small record
                if not self.recv(_RECV_CHUNK):
                    return
        except ssl.SSLError:
            raise
        except OSError:
            return

    def _flush(self) -> None:
        with self._send_lock:
            with self._ssl_lock:
                out = self._outgoing.read()
            if out:
                self._raw.sendall(out)

    def _flush_quietly(self) -> None:
        try:
            self._flush()
        except OSError:
            pass

    def settimeout(self, timeout: Optional[float]) -> None:
        self._raw.settimeout(timeout)

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self._raw.setsockopt(level, option, value)

    def shutdown(self, how: int) -> None:
        self._raw.shutdown(how)

    def close(self) -> None:
        self._raw.close()
