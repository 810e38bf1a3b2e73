/**
 * idgen client for Node.js: the idgen wire protocol (versions 1 to 4) over TCP or TLS,
 * pipelining, failover across nodes, a prefetch pool, named sequences (with prefetch for
 * dense ones), version 7 UUIDs (as canonical strings), and the shared string forms and
 * masking. IDs and sequence values are `bigint`
 * everywhere (never `number`).
 */

export { Client, Layout, TimeBoundsError, formatId, parseNode } from "./client.js";
export type { CallOptions, ClientOptions, ClientStats, IdForm, IdParts, NodeState, TimeBoundsKind, TlsOptions, UuidParts } from "./client.js";
export { PrefetchPool } from "./prefetch.js";
export type { PrefetchOptions, PrefetchStats } from "./prefetch.js";
export type { SequenceBufferState } from "./sequences.js";
export type { SequenceMode } from "./protocol.js";
export {
  ClientClosedError,
  DeadlineError,
  IdgenError,
  NoNodeAvailableError,
  ProtocolError,
  SequencesUnsupportedError,
  ServerError,
  TlsError,
  UnavailableError,
  UuidsUnsupportedError,
} from "./errors.js";
export type { TlsErrorKind } from "./errors.js";
export { FormError, Masker, checkId, fromBase32, fromBase62, fromDecimal, toBase32, toBase62, toDecimal } from "./forms.js";
export { STATUSES, closesConnection, retryElsewhere, statusName } from "./status.js";
export type { StatusInfo } from "./status.js";
export * as protocol from "./protocol.js";
