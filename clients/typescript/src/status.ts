/** Status codes of ERROR frames (PROTOCOL.md section 5) and their classes. */

/** One row of the status table. */
export interface StatusInfo {
  readonly code: number;
  readonly name: string;
  /** The server closes the connection after this ERROR. */
  readonly closes: boolean;
  /** This node cannot serve now: try another one. */
  readonly retryElsewhere: boolean;
}

function row(code: number, name: string, closes: boolean, retryElsewhere: boolean): StatusInfo {
  return Object.freeze({ code, name, closes, retryElsewhere });
}

/** The normative table of PROTOCOL.md section 5, by code. */
export const STATUSES: ReadonlyMap<number, StatusInfo> = new Map(
  [
    row(100, "BAD_FRAME", true, false),
    row(101, "FRAME_TOO_LARGE", true, false),
    row(102, "HANDSHAKE_REQUIRED", true, false),
    row(103, "UNSUPPORTED_VERSION", true, false),
    row(200, "INVALID_COUNT", false, false),
    row(201, "BATCH_TOO_LARGE", false, false),
    row(202, "UNKNOWN_OPCODE", false, false),
    row(203, "UNKNOWN_SEQUENCE", false, false),
    row(204, "INVALID_SEQUENCE_NAME", false, false),
    row(205, "INVALID_OPTION", false, false),
    row(206, "IDEMPOTENCY_KEY_REUSED", false, false),
    row(207, "IDEMPOTENCY_KEY_IN_FLIGHT", false, false),
    row(300, "UNAVAILABLE_LEASE", false, true),
    row(301, "UNAVAILABLE_CLOCK", false, true),
    row(302, "SHUTTING_DOWN", true, true),
    row(303, "OVERLOADED", true, true),
    row(304, "EXHAUSTED", false, false),
    row(305, "RANGE_CHANGED", true, true),
    row(306, "BUSY", false, true),
    row(307, "SEQUENCE_USED_UP", false, false),
    row(308, "SEQUENCE_UNAVAILABLE", false, true),
    row(500, "INTERNAL", true, false),
  ].map((s) => [s.code, s] as const),
);

export const BAD_FRAME = 100;
export const FRAME_TOO_LARGE = 101;
export const RANGE_CHANGED = 305;
export const UNKNOWN_SEQUENCE = 203;
export const INVALID_SEQUENCE_NAME = 204;
export const SEQUENCE_USED_UP = 307;
export const INVALID_OPTION = 205;
export const IDEMPOTENCY_KEY_REUSED = 206;
export const IDEMPOTENCY_KEY_IN_FLIGHT = 207;
export const SEQUENCE_UNAVAILABLE = 308;

/** The status name, or `null` for a code not in the table. */
export function statusName(code: number): string | null {
  return STATUSES.get(code)?.name ?? null;
}

/**
 * Whether the server closes the connection after this status. Known codes per the table;
 * unknown codes by class: 2xx and 3xx keep the connection open, every other code closes it.
 */
export function closesConnection(code: number): boolean {
  const info = STATUSES.get(code);
  if (info !== undefined) return info.closes;
  return !(code >= 200 && code <= 399);
}

/** Whether to try another node. Known codes per the table; unknown codes: 3xx. */
export function retryElsewhere(code: number): boolean {
  const info = STATUSES.get(code);
  if (info !== undefined) return info.retryElsewhere;
  return code >= 300 && code <= 399;
}
