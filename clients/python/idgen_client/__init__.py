"""Python client for idgen, the 64-bit time-ordered unique ID service.

Standard library only (masking needs the ``mask`` extra). Quick start::

    from idgen_client import Client

    with Client(["10.0.0.1:7420", "10.0.0.2:7420"], prefetch=1000) as client:
        one = client.next_id()
        many = client.next_ids(10_000)        # increasing, from one node, all or nothing
        parts = client.decode(one)            # IdParts(unix_ms, timestamp, worker, region, sequence)
        lo, hi = client.layout.bounds(from_ms, to_ms)   # WHERE id >= lo AND id < hi

    # Named sequences (protocol version 3; created with `idgen seq create NAME`):
    with Client(["10.0.0.1:7420"], sequence_prefetch=100) as client:
        order_no = client.next_value("orders")          # dense: answered from a buffer
        invoices = client.next_values("invoices", 3)    # strict: one request per call

    # Version 7 UUIDs made from IDs (protocol version 4), as uuid.UUID:
    with Client(["10.0.0.1:7420"]) as client:
        u = client.next_uuid()
        us = client.next_uuids(100)                     # increasing, from one node
        client.decode_uuid(u)                           # UuidParts(id, unix_ms, ..., sequence)

Configured by a URL or the environment (``IDGEN_NODES``, ``IDGEN_CLIENT_*``)::

    client = Client.from_url("idgens://n1:7420,n2:7420?ca=/etc/idgen/ca.crt", prefetch=1000)
    client = Client.from_env(hooks=[my_metrics_hook])

Events are logged to ``logging.getLogger("idgen_client")`` (quiet by default) and passed to
``hooks=`` (:mod:`idgen_client.observe`); an OpenTelemetry adapter is
:class:`idgen_client.otel.OpenTelemetryHook` (``pip install 'idgen-client[otel]'``).

String forms live in :mod:`idgen_client.forms`, public-ID masking (FF1 over AES; needs
``pip install 'idgen-client[mask]'``) in :mod:`idgen_client.mask`, the frame codec in
:mod:`idgen_client.protocol`.
"""

from . import aio, forms, mask, observe, protocol
from .client import (
    AfterLastTimestamp,
    BeforeEpoch,
    Client,
    EmptyInterval,
    IdParts,
    Layout,
    MaskedIdList,
    TimeBoundsError,
    UuidParts,
    key_node,
)
from .aio import AsyncClient
from .config import ConfigError, Settings, parse_url
from .errors import (
    ClientClosedError,
    IdgenError,
    KeyNodeUnavailableError,
    NoNodeAvailable,
    OptionsUnsupportedError,
    ProtocolError,
    SequencesUnsupportedError,
    ServerError,
    TLSError,
    UnavailableError,
    UuidsUnsupportedError,
)
from .generations import LayoutGeneration, LayoutGenerations
from .mask import Keyring, MaskError

__version__ = "0.1.0"

__all__ = [
    "Client",
    "AsyncClient",
    "IdParts",
    "Layout",
    "LayoutGeneration",
    "LayoutGenerations",
    "UuidParts",
    "TimeBoundsError",
    "BeforeEpoch",
    "AfterLastTimestamp",
    "EmptyInterval",
    "Keyring",
    "MaskError",
    "IdgenError",
    "ServerError",
    "UnavailableError",
    "NoNodeAvailable",
    "TLSError",
    "ProtocolError",
    "ClientClosedError",
    "SequencesUnsupportedError",
    "UuidsUnsupportedError",
    "OptionsUnsupportedError",
    "KeyNodeUnavailableError",
    "MaskedIdList",
    "key_node",
    "ConfigError",
    "Settings",
    "parse_url",
    "observe",
    "aio",
    "forms",
    "mask",
    "protocol",
]
