package dev.idgen.client;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A status code of an ERROR frame and its class (the status table of the protocol, section 5).
 *
 * <p>Codes not in the table follow their class: {@code 2xx} and {@code 3xx} leave the
 * connection open, {@code 3xx} means "try another node", every other code closes the
 * connection.
 */
public final class Status {
    public static final int BAD_FRAME = 100;
    public static final int FRAME_TOO_LARGE = 101;
    public static final int HANDSHAKE_REQUIRED = 102;
    public static final int UNSUPPORTED_VERSION = 103;
    public static final int INVALID_COUNT = 200;
    public static final int BATCH_TOO_LARGE = 201;
    public static final int UNKNOWN_OPCODE = 202;
    public static final int UNKNOWN_SEQUENCE = 203;
    public static final int INVALID_SEQUENCE_NAME = 204;
    public static final int INVALID_OPTION = 205;
    public static final int IDEMPOTENCY_KEY_REUSED = 206;
    public static final int IDEMPOTENCY_KEY_IN_FLIGHT = 207;
    public static final int UNAVAILABLE_LEASE = 300;
    public static final int UNAVAILABLE_CLOCK = 301;
    public static final int SHUTTING_DOWN = 302;
    public static final int OVERLOADED = 303;
    public static final int EXHAUSTED = 304;
    public static final int RANGE_CHANGED = 305;
    public static final int BUSY = 306;
    public static final int SEQUENCE_USED_UP = 307;
    public static final int SEQUENCE_UNAVAILABLE = 308;
    public static final int INTERNAL = 500;

    /** One row of the status table. */
    public record Info(int code, String name, boolean closesConnection, boolean retryElsewhere) {}

    private static final Map<Integer, Info> TABLE;

    static {
        Map<Integer, Info> t = new LinkedHashMap<>();
        for (Info i : new Info[] {
            new Info(BAD_FRAME, "BAD_FRAME", true, false),
            new Info(FRAME_TOO_LARGE, "FRAME_TOO_LARGE", true, false),
            new Info(HANDSHAKE_REQUIRED, "HANDSHAKE_REQUIRED", true, false),
            new Info(UNSUPPORTED_VERSION, "UNSUPPORTED_VERSION", true, false),
            new Info(INVALID_COUNT, "INVALID_COUNT", false, false),
            new Info(BATCH_TOO_LARGE, "BATCH_TOO_LARGE", false, false),
            new Info(UNKNOWN_OPCODE, "UNKNOWN_OPCODE", false, false),
            new Info(UNKNOWN_SEQUENCE, "UNKNOWN_SEQUENCE", false, false),
            new Info(INVALID_SEQUENCE_NAME, "INVALID_SEQUENCE_NAME", false, false),
            new Info(INVALID_OPTION, "INVALID_OPTION", false, false),
            new Info(IDEMPOTENCY_KEY_REUSED, "IDEMPOTENCY_KEY_REUSED", false, false),
            new Info(IDEMPOTENCY_KEY_IN_FLIGHT, "IDEMPOTENCY_KEY_IN_FLIGHT", false, false),
            new Info(UNAVAILABLE_LEASE, "UNAVAILABLE_LEASE", false, true),
            new Info(UNAVAILABLE_CLOCK, "UNAVAILABLE_CLOCK", false, true),
            new Info(SHUTTING_DOWN, "SHUTTING_DOWN", true, true),
            new Info(OVERLOADED, "OVERLOADED", true, true),
            new Info(EXHAUSTED, "EXHAUSTED", false, false),
            new Info(RANGE_CHANGED, "RANGE_CHANGED", true, true),
            new Info(BUSY, "BUSY", false, true),
            new Info(SEQUENCE_USED_UP, "SEQUENCE_USED_UP", false, false),
            new Info(SEQUENCE_UNAVAILABLE, "SEQUENCE_UNAVAILABLE", false, true),
            new Info(INTERNAL, "INTERNAL", true, false),
        }) {
            t.put(i.code(), i);
        }
        TABLE = Collections.unmodifiableMap(t);
    }

    private Status() {}

    /** Every status of the table, by code, in table order. */
    public static Map<Integer, Info> table() {
        return TABLE;
    }

    /** The status name, or {@code null} for a code not in the table. */
    public static String name(int code) {
        Info i = TABLE.get(code);
        return i == null ? null : i.name();
    }

    /** Whether the server closes the connection after an ERROR with this code. */
    public static boolean closesConnection(int code) {
        Info i = TABLE.get(code);
        if (i != null) {
            return i.closesConnection();
        }
        return !(code >= 200 && code <= 399);
    }

    /** Whether another node may serve the request (3xx except EXHAUSTED and SEQUENCE_USED_UP). */
    public static boolean retryElsewhere(int code) {
        Info i = TABLE.get(code);
        if (i != null) {
            return i.retryElsewhere();
        }
        return code >= 300 && code <= 399;
    }
}
