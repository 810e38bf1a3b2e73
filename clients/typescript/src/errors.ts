/**
 * Errors raised by the idgen client.
 *
 * ```text
 * IdgenError
 *  +-- ProtocolError        the server sent something that breaks the protocol
 *  +-- ServerError          the server answered with an ERROR frame (status, name, closes, retryElsewhere)
 *  +-- UnavailableError     transport failure: refused, reset, closed, no answer in time
 *  |    +-- NoNodeAvailableError  every node failed or is backing off
 *  |    +-- TlsError        the TLS handshake failed (certificate, name, client certificate)
 *  +-- SequencesUnsupportedError  the node negotiated a protocol version below 3 (no named sequences)
 *  +-- UuidsUnsupportedError      the node negotiated a protocol version below 4 (no UUIDs)
 *  +-- DeadlineError        the call's own deadline (timeoutMs or AbortSignal) ran out
 *  +-- ClientClosedError    the client was closed
 * ```
 *
 * Retrying a failed request on another node is always safe: a server never sends an ID
 * twice, so a request that failed (or was abandoned) leaves at most a gap, never a duplicate.
 */

import { closesConnection, retryElsewhere, statusName } from "./status.js";

/** Base class of every error this package raises (bad arguments raise TypeError/RangeError). */
export class IdgenError extends Error {
  /** The node ("host:port") the error is about, when there is one. */
  node: string | undefined;

  constructor(message: string, options?: { node?: string | undefined; cause?: unknown }) {
    const node = options?.node;
    super(node ? `${node}: ${message}` : message, options?.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = new.target.name;
    this.node = node;
  }
}

/**
 * The server sent a malformed frame, or a well-formed frame that does not answer the request
 * it stands for. The connection is dropped and the node marked down. `status` is the wire
 * status of a framing fault (100 BAD_FRAME, 101 FRAME_TOO_LARGE), or `null` for an answer that
 * does not fit its request.
 */
export class ProtocolError extends IdgenError {
  readonly status: number | null;
  readonly detail: string;

  constructor(detail: string, status: number | null = null, node?: string) {
    super(`protocol error: ${detail}`, { node });
    this.status = status;
    this.detail = detail;
  }

  /** The same error, about `node`. */
  withNode(node: string): ProtocolError {
    return new ProtocolError(this.detail, this.status, node);
  }
}

/**
 * The server answered with an ERROR frame. Act on `code` only; `serverMessage` is for humans.
 * `statusName` is `null` for a code this client does not know; `closes` and `retryElsewhere`
 * come from the status table (unknown codes by their class).
 */
export class ServerError extends IdgenError {
  readonly code: number;
  readonly statusName: string | null;
  readonly serverMessage: string;
  readonly closes: boolean;
  readonly retryElsewhere: boolean;

  constructor(code: number, serverMessage: string, node?: string) {
    const name = statusName(code);
    super(`server error ${code} ${name ?? "UNKNOWN"}: ${serverMessage}`, { node });
    this.code = code;
    this.statusName = name;
    this.serverMessage = serverMessage;
    this.closes = closesConnection(code);
    this.retryElsewhere = retryElsewhere(code);
  }
}

/**
 * A node could not be reached or stopped answering: connection refused or reset, the server
 * closed the connection with the request unanswered, or no answer within `timeoutMs`.
 */
export class UnavailableError extends IdgenError {
  /** The connection broke after it was open: closed or reset by the node (not a stall, not
   * a failed connect). Like every other transport failure it is a node failure: the call
   * moves on to the next node (clients/vectors/SCENARIOS.md). */
  readonly lost: boolean;

  constructor(message: string, node?: string, cause?: unknown, lost = false) {
    super(message, { node, cause });
    this.lost = lost;
  }
}

/**
 * No node could serve the call. `errors` maps every node to its last error (`null`: never
 * tried); `retryInMs` maps a node that is backing off to the milliseconds before it is tried
 * again.
 */
export class NoNodeAvailableError extends UnavailableError {
  readonly errors: ReadonlyMap<string, Error | null>;
  readonly retryInMs: ReadonlyMap<string, number>;

  constructor(errors: Map<string, Error | null>, retryInMs: Map<string, number>) {
    const parts: string[] = [];
    for (const [node, err] of errors) {
      let text = err ? `${node}: ${err.message}` : `${node}: no error recorded`;
      const wait = retryInMs.get(node);
      if (wait !== undefined) text += ` (down, retried in ${(wait / 1000).toFixed(2)}s)`;
      parts.push(text);
    }
    super(`no idgen node available; ${parts.join("; ")}`);
    this.errors = errors;
    this.retryInMs = retryInMs;
  }
}

/** Why a TLS connection failed. */
export type TlsErrorKind =
  | "unknown_issuer"
  | "name_mismatch"
  | "expired"
  | "not_yet_valid"
  | "bad_certificate"
  | "client_certificate_required"
  | "client_certificate_rejected"
  | "handshake";

/**
 * The TLS connection to a node failed: a node fault like any other UnavailableError (the
 * client marks the node down and fails over). `kind` names the cause; `tlsCode` is Node's or
 * OpenSSL's error code (e.g. `UNABLE_TO_VERIFY_LEAF_SIGNATURE`).
 */
export class TlsError extends UnavailableError {
  readonly kind: TlsErrorKind;
  readonly tlsCode: string;

  constructor(kind: TlsErrorKind, message: string, tlsCode: string, node?: string, cause?: unknown) {
    super(`TLS: ${message}`, node, cause);
    this.kind = kind;
    this.tlsCode = tlsCode;
  }
}

/**
 * A named-sequence call (`nextValue`, `nextValues`) reached a node whose connection negotiated
 * a protocol version below 3: it has no sequences over this protocol. Nothing was sent and no
 * other node was tried (the node is not at fault, and is not marked down). `version` is the
 * version the node speaks (limited by the client's `maxVersion` when that is below 3).
 */
export class SequencesUnsupportedError extends IdgenError {
  readonly version: number;

  constructor(version: number, node?: string) {
    super(`the node speaks protocol version ${version}; named sequences need version 3`, { node });
    this.version = version;
  }
}

/**
 * A UUID call (`nextUuid`, `nextUuids`) reached a node whose connection negotiated a protocol
 * version below 4: it has no GET_UUIDS. Nothing was sent and no other node was tried (the
 * node is not at fault, and is not marked down). `version` is the version the node speaks
 * (limited by the client's `maxVersion` when that is below 4).
 */
export class UuidsUnsupportedError extends IdgenError {
  readonly version: number;

  constructor(version: number, node?: string) {
    super(`the node speaks protocol version ${version}; UUIDs need protocol version 4`, { node });
    this.version = version;
  }
}

/**
 * A call with `after`, an idempotency key or masking (`nextIdsWith`, `nextMaskedIds`)
 * reached a node whose connection negotiated a protocol version below 5: the node is too old
 * for GET_IDS_WITH. Nothing was sent, nothing was dropped silently, no other node was tried.
 */
export class IdsWithUnsupportedError extends IdgenError {
  readonly version: number;

  constructor(version: number, node?: string) {
    super(`the node is too old: it speaks protocol version ${version}; after, idempotency keys and masked IDs need protocol version 5`, { node });
    this.version = version;
  }
}

/**
 * A request with an idempotency key failed on its node (the one the key hashes to) with an
 * error that would otherwise send the call to another node. It was NOT retried elsewhere:
 * another node would issue new IDs. `cause` is the node's error; retry the same call (same
 * key) later, and it reaches the same node.
 */
export class IdempotencyKeyNodeError extends IdgenError {
  constructor(node: string, cause: Error) {
    super(`the request with an idempotency key failed on its node ${node} and was not retried on another node (that would issue new IDs): ${cause.message}`, { node, cause });
  }
}

/** The call's own deadline (`timeoutMs` or `signal`) ran out before it was served. */
export class DeadlineError extends IdgenError {
  constructor(message: string, cause?: unknown) {
    super(message, { cause });
  }
}

/** The client was closed by the application. */
export class ClientClosedError extends IdgenError {
  constructor(message = "the client is closed") {
    super(message);
  }
}
