/**
 * idgen client for Node.js: the idgen wire protocol (versions 1 to 5) over TCP or TLS,
 * pipelining, failover across nodes, a prefetch pool, named sequences (with prefetch for
 * dense ones), version 7 UUIDs (as canonical strings), the shared string forms and FF1
 * masking. IDs and sequence values are `bigint`
 * everywhere (never `number`).
 */

export { Client, Layout, TimeBoundsError, fnv1a64, formatId, keyNodeIndex, parseNode } from "./client.js";
export type { CallOptions, IdOptions, MaskedIds, ClientOptions, ClientStats, IdForm, IdParts, NodeState, TimeBoundsKind, TlsOptions, UuidParts } from "./client.js";
export { CLIENT_ENV_VARIABLES, ConfigError, DEFAULT_PORT, MAX_CONFIG_TIMEOUT_MS, configFromEnv, parseUrl } from "./config.js";
export type { IdgenConfig } from "./config.js";
export { EVENT_NAMES, eventChannel } from "./events.js";
export type { HooksOption, IdgenEventFields, IdgenEventMessage, IdgenEventName, IdgenHook, IdgenHookArgs, IdgenOp } from "./events.js";
export { LayoutGenerations } from "./generations.js";
export type { LayoutGeneration } from "./generations.js";
export { PrefetchPool } from "./prefetch.js";
export type { PrefetchOptions, PrefetchStats } from "./prefetch.js";
export type { SequenceBufferState } from "./sequences.js";
export type { SequenceMode } from "./protocol.js";
export {
  ClientClosedError,
  DeadlineError,
  IdempotencyKeyNodeError,
  IdgenError,
  IdsWithUnsupportedError,
  NoNodeAvailableError,
  ProtocolError,
  SequencesUnsupportedError,
  ServerError,
  TlsError,
  UnavailableError,
  UuidsUnsupportedError,
} from "./errors.js";
export type { TlsErrorKind } from "./errors.js";
export { FormError, checkId, fromBase32, fromBase62, fromDecimal, toBase32, toBase62, toDecimal } from "./forms.js";
export {
  MASKED_STRING_LENGTH,
  MASK_DEFAULT_WIDTH,
  MASK_KEYS_ENV,
  MASK_MAX_KEY_ID,
  MASK_MAX_WIDTH,
  MASK_MIN_WIDTH,
  MaskError,
  MaskKeyring,
  maskedString,
} from "./mask.js";
export { STATUSES, closesConnection, retryElsewhere, statusName } from "./status.js";
export type { StatusInfo } from "./status.js";
export * as protocol from "./protocol.js";
