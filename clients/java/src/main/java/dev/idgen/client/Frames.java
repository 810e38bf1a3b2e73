package dev.idgen.client;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

/**
 * The wire format (protocol/PROTOCOL.md): request encoders and the response decoder. Pure
 * functions, no I/O. Framing faults raise {@link ProtocolException} with status 100
 * (BAD_FRAME) or 101 (FRAME_TOO_LARGE), as early as the bytes allow: an oversized length
 * after its four bytes, a wrong length for a known opcode after the opcode byte.
 */
public final class Frames {
    public static final byte[] MAGIC = {'I', 'D', 'G', 'N'};
    public static final int MIN_VERSION = 1;
    /**
     * The newest protocol version this client speaks (version 2 adds GET_RANGES, version 3
     * GET_VALUES for named sequences, version 4 GET_UUIDS for version 7 UUIDs, version 5
     * GET_IDS_WITH/MASKED_IDS: after, idempotency keys, masked IDs).
     */
    public static final int MAX_VERSION = 5;
    /** The first protocol version with GET_RANGES/RANGES. */
    public static final int RANGES_VERSION = 2;
    /** The first protocol version with named sequences (GET_VALUES/VALUES). */
    public static final int SEQUENCES_VERSION = 3;
    /** The first protocol version with UUIDs (GET_UUIDS/UUIDS). */
    public static final int UUIDS_VERSION = 4;
    /** The first protocol version with GET_IDS_WITH/MASKED_IDS. */
    public static final int IDS_WITH_VERSION = 5;

    public static final int OP_HELLO = 0x01;
    public static final int OP_GET_IDS = 0x02;
    public static final int OP_PING = 0x03;
    public static final int OP_GET_RANGES = 0x04;
    public static final int OP_GET_VALUES = 0x05;
    public static final int OP_GET_UUIDS = 0x06;
    public static final int OP_GET_IDS_WITH = 0x07;
    public static final int OP_HELLO_OK = 0x81;
    public static final int OP_IDS = 0x82;
    public static final int OP_PONG = 0x83;
    public static final int OP_RANGES = 0x84;
    public static final int OP_VALUES = 0x85;
    public static final int OP_UUIDS = 0x86;
    public static final int OP_MASKED_IDS = 0x87;
    public static final int OP_ERROR = 0xFF;

    static final int HELLO_OK_LENGTH = 33;
    static final int PONG_LENGTH = 9;
    static final int ERROR_MIN_LENGTH = 3;
    static final int ERROR_MAX_LENGTH = 258;

    public static final int DEFAULT_MAX_BATCH = 65536;
    /** The longest sequence name, in bytes. */
    public static final int MAX_SEQUENCE_NAME = 64;
    /** The most values one GET_VALUES may ask for, whatever the node's {@code max_batch}: 2^20. */
    public static final int MAX_VALUES_PER_CALL = 1 << 20;
    /** The frame length of a VALUES frame without values (opcode, mode, count). */
    static final int VALUES_HEAD_LENGTH = 6;
    /**
     * The response frame limit before HELLO_OK has arrived: 6 + 8 * 65536 (a VALUES frame of
     * 65536 values; an IDS frame is one byte shorter).
     */
    public static final long DEFAULT_MAX_RESPONSE_FRAME = 6L + 8L * DEFAULT_MAX_BATCH;

    private Frames() {}

    /** A decoded response frame. */
    public sealed interface Frame permits HelloOk, Ids, Ranges, Values, Uuids, MaskedIds, Pong, ErrorFrame {}

    /** HELLO_OK (0x81): the negotiated version, the ID layout and the connection's limits. */
    public record HelloOk(
            int version,
            long epochMs,
            int timestampBits,
            int workerBits,
            int sequenceBits,
            int regionBits,
            long maxBatch,
            long maxRequestFrame,
            long workerFirst,
            long workerCount,
            int shard)
            implements Frame {
        /** The ID layout this HELLO_OK announces. */
        public Layout layout() {
            return new Layout(epochMs, timestampBits, workerBits, sequenceBits, regionBits);
        }
    }

    /** IDS (0x82): the IDs of one GET_IDS, increasing. */
    public record Ids(long[] ids) implements Frame {}

    /**
     * RANGES (0x84, version 2): runs of consecutive IDs, run {@code i} being {@code firsts[i]
     * .. firsts[i] + counts[i] - 1}; {@code total} is their sum.
     */
    public record Ranges(long total, long[] firsts, long[] counts) implements Frame {
        /** The IDs, in order. */
        public long[] expand() {
            if (total > Integer.MAX_VALUE - 8) {
                throw new IllegalStateException("RANGES of " + total + " IDs does not fit an array");
            }
            long[] out = new long[(int) total];
            int k = 0;
            for (int r = 0; r < firsts.length; r++) {
                long first = firsts[r];
                for (long c = 0, n = counts[r]; c < n; c++) {
                    out[k++] = first + c;
                }
            }
            return out;
        }
    }

    /**
     * VALUES (0x85, version 3): the values of one GET_VALUES, each in {@code 1 ..= 2^63 - 1},
     * strictly increasing, and the sequence's mode.
     */
    public record Values(SequenceMode mode, long[] values) implements Frame {}

    /**
     * UUIDS (0x86, version 4): the UUIDs of one GET_UUIDS, each of version 7 and RFC 9562's
     * variant, strictly increasing as 128-bit unsigned numbers.
     */
    public record Uuids(UUID[] uuids) implements Frame {}

    /**
     * MASKED_IDS (0x87, version 5): the IDs of one GET_IDS_WITH with the masked option, each
     * masked with the node's key {@code keyId} (0..=61), in the IDs' order.
     */
    public record MaskedIds(int keyId, long[] masked) implements Frame {}

    /** PONG (0x83): the token of the PING it answers. */
    public record Pong(long token) implements Frame {}

    /** ERROR (0xFF): a status and a message for humans. */
    public record ErrorFrame(int status, String message) implements Frame {
        public String name() {
            return Status.name(status);
        }

        public boolean closes() {
            return Status.closesConnection(status);
        }

        public boolean retryElsewhere() {
            return Status.retryElsewhere(status);
        }
    }

    /** A decoded frame and the number of bytes it took. */
    public record Decoded(Frame frame, int consumed) {}

    // ---------------------------------------------------------------------------------
    // Requests

    /** HELLO (0x01) offering {@code minVersion ..= maxVersion}. */
    public static byte[] hello(int minVersion, int maxVersion) {
        return ByteBuffer.allocate(13)
                .putInt(9)
                .put((byte) OP_HELLO)
                .put(MAGIC)
                .putShort((short) checkU16(minVersion))
                .putShort((short) checkU16(maxVersion))
                .array();
    }

    /** GET_IDS (0x02) of {@code count} (any u32; the server refuses 0 and counts above max_batch). */
    public static byte[] getIds(long count) {
        return countFrame(OP_GET_IDS, count);
    }

    /** GET_RANGES (0x04, version 2) of {@code count}. */
    public static byte[] getRanges(long count) {
        return countFrame(OP_GET_RANGES, count);
    }

    /**
     * GET_VALUES (0x05, version 3) of {@code count} values (any u32; the server refuses 0 and
     * counts above max_batch) of the sequence {@code name}.
     *
     * @throws IllegalArgumentException for a name that breaks the name rule ({@link
     *     #sequenceName(String)}) or a count that does not fit a u32
     */
    public static byte[] getValues(long count, String name) {
        byte[] n = sequenceName(name);
        ByteBuffer b = ByteBuffer.allocate(9 + n.length);
        putGetValues(b, count, n);
        return b.array();
    }

    /** Appends GET_VALUES of {@code count} values of {@code name} (bytes already checked). */
    static void putGetValues(ByteBuffer out, long count, byte[] name) {
        out.putInt(5 + name.length).put((byte) OP_GET_VALUES).putInt((int) checkU32(count)).put(name);
    }

    /**
     * The bytes of a sequence name: 1 to 64 bytes of {@code a-z}, {@code 0-9}, {@code .},
     * {@code _} and {@code -}, the first a letter or a digit.
     *
     * @throws IllegalArgumentException naming the rule the name breaks
     */
    public static byte[] sequenceName(String name) {
        if (name == null) {
            throw new IllegalArgumentException("the sequence name must not be null");
        }
        byte[] b = name.getBytes(StandardCharsets.UTF_8);
        checkSequenceName(b);
        return b;
    }

    /** {@link #sequenceName(String)} on raw bytes (checked as the server checks them). */
    static void checkSequenceName(byte[] b) {
        if (b.length == 0) {
            throw new IllegalArgumentException("a sequence name is 1 to 64 bytes, not empty");
        }
        if (b.length > MAX_SEQUENCE_NAME) {
            throw new IllegalArgumentException("a sequence name is at most 64 bytes, not " + b.length);
        }
        for (int i = 0; i < b.length; i++) {
            int c = b[i] & 0xFF;
            boolean alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
            if (!(alnum || (i > 0 && (c == '.' || c == '_' || c == '-')))) {
                throw new IllegalArgumentException("sequence name " + quote(b) + ": a name is a-z, 0-9, '.', '_' and '-',"
                        + " starting with a letter or a digit (byte " + i + " is " + describe(c) + ")");
            }
        }
    }

    private static String quote(byte[] b) {
        return '"' + new String(b, StandardCharsets.UTF_8) + '"';
    }

    private static String describe(int c) {
        return c >= 0x21 && c < 0x7F ? "'" + (char) c + "'" : String.format("0x%02x", c);
    }

    /**
     * What a client checks before it sends GET_VALUES of {@code count} values of {@code name}
     * on a connection that negotiated {@code version} with these HELLO_OK limits.
     *
     * @throws IllegalArgumentException for a count outside {@code 1 ..= min(maxBatch, 2^20)},
     *     a bad name, or a frame longer than the node's {@code max_request_frame}
     * @throws SequencesUnsupportedException for a version below 3
     */
    static void checkGetValues(int version, long maxBatch, long maxRequestFrame, long count, byte[] name, String node) {
        checkValuesCount(count);
        checkSequenceName(name);
        if (version < SEQUENCES_VERSION) {
            throw new SequencesUnsupportedException(version, node);
        }
        if (count > maxBatch) {
            throw new IllegalArgumentException("n " + count + " is above the node's max_batch " + maxBatch);
        }
        if (5L + name.length > maxRequestFrame) {
            throw new IllegalArgumentException("a GET_VALUES for a " + name.length + "-byte sequence name is "
                    + (5 + name.length) + " bytes long, above the node's max_request_frame " + maxRequestFrame);
        }
    }

    /** @throws IllegalArgumentException for a count outside {@code 1 ..= 2^20} */
    static void checkValuesCount(long count) {
        if (count < 1 || count > MAX_VALUES_PER_CALL) {
            throw new IllegalArgumentException("n must be in 1 .. " + MAX_VALUES_PER_CALL + ", not " + count);
        }
    }

    /** The protocol version that defines request {@code opcode} (1 for HELLO, GET_IDS, PING). */
    static int requestVersion(int opcode) {
        return switch (opcode) {
            case OP_GET_RANGES -> RANGES_VERSION;
            case OP_GET_VALUES -> SEQUENCES_VERSION;
            case OP_GET_UUIDS -> UUIDS_VERSION;
            case OP_GET_IDS_WITH -> IDS_WITH_VERSION;
            default -> 1;
        };
    }

    /** The longest idempotency key, in bytes. */
    public static final int MAX_IDEMPOTENCY_KEY = 64;

    /**
     * GET_IDS_WITH (0x07, version 5) of {@code count}: {@code after} (or {@code null}) an ID
     * every answered ID exceeds, {@code key} (or {@code null}) an idempotency key of 1..=64
     * visible ASCII bytes, {@code masked} for a MASKED_IDS answer.
     *
     * @throws IllegalArgumentException for a key that is not 1..=64 bytes of {@code !..~} or a
     *     negative {@code after} (the server would answer INVALID_OPTION)
     */
    public static byte[] getIdsWith(long count, Long after, String key, boolean masked) {
        byte[] k = key == null ? null : idempotencyKey(key);
        if (after != null && after < 0) {
            throw new IllegalArgumentException("after " + Long.toUnsignedString(after) + " has the sign bit set");
        }
        int length = 6 + (after != null ? 8 : 0) + (k != null ? 1 + k.length : 0);
        ByteBuffer out = ByteBuffer.allocate(4 + length);
        out.putInt(length).put((byte) OP_GET_IDS_WITH).putInt((int) checkU32(count));
        out.put((byte) ((after != null ? 0x01 : 0) | (k != null ? 0x02 : 0) | (masked ? 0x04 : 0)));
        if (after != null) {
            out.putLong(after);
        }
        if (k != null) {
            out.put((byte) k.length).put(k);
        }
        return out.array();
    }

    /** An idempotency key's bytes, checked: 1..=64 visible ASCII bytes ({@code !} to {@code ~}). */
    public static byte[] idempotencyKey(String key) {
        byte[] b = key.getBytes(StandardCharsets.UTF_8);
        if (b.length < 1 || b.length > MAX_IDEMPOTENCY_KEY) {
            throw new IllegalArgumentException("idempotency key of " + b.length + " bytes, not 1.." + MAX_IDEMPOTENCY_KEY);
        }
        for (byte c : b) {
            if (c < '!' || c > '~') {
                throw new IllegalArgumentException("idempotency key " + quote(b) + " holds " + describe(c & 0xFF)
                        + ": only visible ASCII (! to ~)");
            }
        }
        return b;
    }

    /** GET_UUIDS (0x06, version 4) for {@code count} version 7 UUIDs. */
    public static byte[] getUuids(long count) {
        return countFrame(OP_GET_UUIDS, count);
    }

    /** PING (0x03) with a u64 token (a Java long, its bits taken as unsigned). */
    public static byte[] ping(long token) {
        return ByteBuffer.allocate(13).putInt(9).put((byte) OP_PING).putLong(token).array();
    }

    static void putCountFrame(ByteBuffer out, int opcode, long count) {
        out.putInt(5).put((byte) opcode).putInt((int) checkU32(count));
    }

    private static byte[] countFrame(int opcode, long count) {
        ByteBuffer b = ByteBuffer.allocate(9);
        putCountFrame(b, opcode, count);
        return b.array();
    }

    private static int checkU16(int v) {
        if (v < 0 || v > 0xFFFF) {
            throw new IllegalArgumentException("version " + v + " does not fit in a u16");
        }
        return v;
    }

    private static long checkU32(long v) {
        if (v < 0 || v > 0xFFFF_FFFFL) {
            throw new IllegalArgumentException("count " + v + " does not fit in a u32");
        }
        return v;
    }

    // ---------------------------------------------------------------------------------
    // Responses

    /**
     * The response frame limit once {@code max_batch} is known (PROTOCOL.md section 7):
     * max(6 + 8 * max_batch, 258), so that an IDS of max_batch IDs, a VALUES of max_batch
     * values (one byte longer: its mode) and any ERROR fit.
     */
    public static long responseFrameLimit(long maxBatch) {
        return Math.max(VALUES_HEAD_LENGTH + 8 * maxBatch, ERROR_MAX_LENGTH);
    }

    /**
     * The response frame limit of a connection that negotiated {@code version}: from version 4
     * max(5 + 16 * max_batch, 258), so that a UUIDS of max_batch UUIDs fits; before, {@link
     * #responseFrameLimit(long)}.
     */
    public static long responseFrameLimit(long maxBatch, int version) {
        if (version >= UUIDS_VERSION) {
            return Math.max(5 + 16 * maxBatch, ERROR_MAX_LENGTH);
        }
        return responseFrameLimit(maxBatch);
    }

    /**
     * Whether {@code a} is below {@code b} as 128-bit unsigned numbers (RFC 9562's order; {@link
     * UUID#compareTo} compares signed halves).
     */
    static boolean uuidBelow(UUID a, UUID b) {
        int hi = Long.compareUnsigned(a.getMostSignificantBits(), b.getMostSignificantBits());
        return hi < 0 || (hi == 0 && Long.compareUnsigned(a.getLeastSignificantBits(), b.getLeastSignificantBits()) < 0);
    }

    private static ProtocolException bad(String message) {
        return new ProtocolException(message, Status.BAD_FRAME, null);
    }

    private static long u32(byte[] b, int off) {
        return ((b[off] & 0xFFL) << 24) | ((b[off + 1] & 0xFFL) << 16) | ((b[off + 2] & 0xFFL) << 8)
                | (b[off + 3] & 0xFFL);
    }

    private static long u64(byte[] b, int off) {
        return ((long) b[off] << 56) | ((b[off + 1] & 0xFFL) << 48) | ((b[off + 2] & 0xFFL) << 40)
                | ((b[off + 3] & 0xFFL) << 32) | ((b[off + 4] & 0xFFL) << 24)
                | ((b[off + 5] & 0xFFL) << 16) | ((b[off + 6] & 0xFFL) << 8) | (b[off + 7] & 0xFFL);
    }

    private static int u16(byte[] b, int off) {
        return ((b[off] & 0xFF) << 8) | (b[off + 1] & 0xFF);
    }

    private static void checkHeader(long length, int opcode, long maxFrame) {
        if (length == 0) {
            throw bad("frame length 0");
        }
        if (length > maxFrame) {
            throw new ProtocolException(
                    "frame length " + length + " exceeds limit " + maxFrame, Status.FRAME_TOO_LARGE, null);
        }
        if (opcode < 0) {
            return;
        }
        switch (opcode) {
            case OP_HELLO_OK -> {
                if (length != HELLO_OK_LENGTH) {
                    throw bad("HELLO_OK length " + length + ", expected " + HELLO_OK_LENGTH);
                }
            }
            case OP_PONG -> {
                if (length != PONG_LENGTH) {
                    throw bad("PONG length " + length + ", expected " + PONG_LENGTH);
                }
            }
            case OP_IDS -> {
                if (length < 5 + 8 || (length - 5) % 8 != 0) {
                    throw bad("IDS length " + length + " is not 5 + 8 * count with count >= 1");
                }
            }
            case OP_RANGES -> {
                if (length < 9 + 12 || (length - 9) % 12 != 0) {
                    throw bad("RANGES length " + length + " is not 9 + 12 * runs with runs >= 1");
                }
            }
            case OP_VALUES -> {
                if (length < VALUES_HEAD_LENGTH + 8 || (length - VALUES_HEAD_LENGTH) % 8 != 0) {
                    throw bad("VALUES length " + length + " is not 6 + 8 * count with count >= 1");
                }
            }
            case OP_UUIDS -> {
                if (length < 5 + 16 || (length - 5) % 16 != 0) {
                    throw bad("UUIDS length " + length + " is not 5 + 16 * count with count >= 1");
                }
            }
            case OP_MASKED_IDS -> {
                if (length < 6 + 8 || (length - 6) % 8 != 0) {
                    throw bad("MASKED_IDS length " + length + " is not 6 + 8 * count with count >= 1");
                }
            }
            case OP_ERROR -> {
                if (length < ERROR_MIN_LENGTH || length > ERROR_MAX_LENGTH) {
                    throw bad("ERROR length " + length + " outside 3..=258");
                }
            }
            default -> throw bad(String.format("unknown response opcode 0x%02x", opcode));
        }
    }

    /**
     * Decodes the first response frame of {@code buf[off .. off + len)}: the frame and its size,
     * or {@code null} when more bytes are needed.
     *
     * @throws ProtocolException (status 100 or 101) for a malformed frame
     */
    public static Decoded decodeResponse(byte[] buf, int off, int len, long maxFrame) {
        if (len < 4) {
            return null;
        }
        long length = u32(buf, off);
        if (len < 5) {
            checkHeader(length, -1, maxFrame);
            return null;
        }
        int opcode = buf[off + 4] & 0xFF;
        checkHeader(length, opcode, maxFrame);
        if (opcode == OP_VALUES) {
            // The mode and the count as soon as they have arrived, before the values.
            if (len >= 6 && SequenceMode.ofByte(buf[off + 5] & 0xFF) == null) {
                throw bad("VALUES with unknown sequence mode " + (buf[off + 5] & 0xFF));
            }
            if (len >= 10 && u32(buf, off + 6) != (length - VALUES_HEAD_LENGTH) / 8) {
                throw bad("VALUES count " + u32(buf, off + 6) + " disagrees with frame length " + length);
            }
        }
        if (opcode == OP_UUIDS && len >= 9 && u32(buf, off + 5) != (length - 5) / 16) {
            // The count as soon as it has arrived, before the UUIDs.
            throw bad("UUIDS count " + u32(buf, off + 5) + " disagrees with frame length " + length);
        }
        if (len - 4 < length) {
            return null;
        }
        int body = off + 5;
        int bodyLen = (int) length - 1;
        return new Decoded(parseBody(opcode, buf, body, bodyLen), 4 + (int) length);
    }

    /** {@link #decodeResponse(byte[], int, int, long)} over a whole array. */
    public static Decoded decodeResponse(byte[] buf, long maxFrame) {
        return decodeResponse(buf, 0, buf.length, maxFrame);
    }

    private static Frame parseBody(int opcode, byte[] b, int off, int len) {
        switch (opcode) {
            case OP_IDS: {
                long count = u32(b, off);
                if (count == 0) {
                    throw bad("IDS with count 0");
                }
                if (4 + 8 * count != len) {
                    throw bad("IDS count " + count + " disagrees with frame length " + (len + 1));
                }
                long[] ids = new long[(int) count];
                int p = off + 4;
                for (int i = 0; i < ids.length; i++, p += 8) {
                    long id = u64(b, p);
                    if (id < 0) {
                        throw bad("IDS holds an ID with the top bit set");
                    }
                    ids[i] = id;
                }
                return new Ids(ids);
            }
            case OP_RANGES: {
                long total = u32(b, off);
                long runs = u32(b, off + 4);
                if (9 + 12 * runs != len + 1) {
                    throw bad("RANGES runs " + runs + " disagrees with frame length " + (len + 1));
                }
                long[] firsts = new long[(int) runs];
                long[] counts = new long[(int) runs];
                long sum = 0;
                long prevLast = -1;
                int p = off + 8;
                for (int r = 0; r < runs; r++, p += 12) {
                    long first = u64(b, p);
                    long count = u32(b, p + 8);
                    if (count == 0) {
                        throw bad("RANGES run " + r + " has count 0");
                    }
                    if (first < 0 || first + (count - 1) < 0) {
                        throw bad("RANGES run " + r + " reaches an ID with the top bit set");
                    }
                    if (r > 0 && first <= prevLast) {
                        throw bad("RANGES runs are not increasing and disjoint");
                    }
                    prevLast = first + (count - 1);
                    firsts[r] = first;
                    counts[r] = count;
                    sum += count;
                }
                if (sum != total) {
                    throw bad("RANGES counts sum to " + sum + ", total says " + total);
                }
                return new Ranges(total, firsts, counts);
            }
            case OP_VALUES: {
                SequenceMode mode = SequenceMode.ofByte(b[off] & 0xFF);
                long count = u32(b, off + 1);
                if (mode == null) {
                    throw bad("VALUES with unknown sequence mode " + (b[off] & 0xFF));
                }
                if (count == 0 || 5 + 8 * count != len) {
                    throw bad("VALUES count " + count + " disagrees with frame length " + (len + 1));
                }
                long[] values = new long[(int) count];
                long previous = 0;
                int p = off + 5;
                for (int i = 0; i < values.length; i++, p += 8) {
                    long v = u64(b, p);
                    if (v <= 0) {
                        throw bad("VALUES holds a value outside 1 ..= 2^63 - 1 (" + Long.toUnsignedString(v) + ")");
                    }
                    if (v <= previous) {
                        throw bad("VALUES are not strictly increasing (" + v + " after " + previous + ")");
                    }
                    values[i] = v;
                    previous = v;
                }
                return new Values(mode, values);
            }
            case OP_UUIDS: {
                long count = u32(b, off);
                if (count == 0 || 4 + 16 * count != len) {
                    throw bad("UUIDS count " + count + " disagrees with frame length " + (len + 1));
                }
                UUID[] uuids = new UUID[(int) count];
                int p = off + 4;
                for (int i = 0; i < uuids.length; i++, p += 16) {
                    UUID u = new UUID(u64(b, p), u64(b, p + 8));
                    if (u.version() != 7) {
                        throw bad("UUIDS holds a UUID of version " + u.version() + ", not 7");
                    }
                    if ((b[p + 8] & 0xC0) != 0x80) {
                        throw bad("UUIDS holds a UUID whose variant bits are not 10: " + u);
                    }
                    if (i > 0 && !uuidBelow(uuids[i - 1], u)) {
                        throw bad("UUIDS are not strictly increasing (" + u + " after " + uuids[i - 1] + ")");
                    }
                    uuids[i] = u;
                }
                return new Uuids(uuids);
            }
            case OP_MASKED_IDS: {
                int keyId = b[off] & 0xFF;
                if (keyId > 61) {
                    throw bad("MASKED_IDS key ID " + keyId + " above 61");
                }
                long count = u32(b, off + 1);
                if (count == 0 || 5 + 8 * count != len) {
                    throw bad("MASKED_IDS count " + count + " disagrees with frame length " + (len + 1));
                }
                long[] masked = new long[(int) count];
                int p = off + 5;
                for (int i = 0; i < masked.length; i++, p += 8) {
                    long v = u64(b, p);
                    if (v < 0) {
                        throw bad("MASKED_IDS holds a value with the top bit set");
                    }
                    masked[i] = v;
                }
                return new MaskedIds(keyId, masked);
            }
            case OP_PONG:
                return new Pong(u64(b, off));
            case OP_ERROR: {
                int status = u16(b, off);
                String message;
                try {
                    message = StandardCharsets.UTF_8.newDecoder()
                            .onMalformedInput(CodingErrorAction.REPORT)
                            .onUnmappableCharacter(CodingErrorAction.REPORT)
                            .decode(ByteBuffer.wrap(b, off + 2, len - 2))
                            .toString();
                } catch (CharacterCodingException e) {
                    throw bad("ERROR message is not UTF-8");
                }
                return new ErrorFrame(status, message);
            }
            case OP_HELLO_OK: {
                HelloOk h = new HelloOk(
                        u16(b, off),
                        u64(b, off + 2),
                        b[off + 10] & 0xFF,
                        b[off + 11] & 0xFF,
                        b[off + 12] & 0xFF,
                        b[off + 13] & 0xFF,
                        u32(b, off + 14),
                        u32(b, off + 18),
                        u32(b, off + 22),
                        u32(b, off + 26),
                        u16(b, off + 30));
                if (h.timestampBits() + h.workerBits() + h.sequenceBits() > 63) {
                    throw bad("HELLO_OK layout bits " + h.timestampBits() + "+" + h.workerBits() + "+"
                            + h.sequenceBits() + " > 63");
                }
                if (h.regionBits() > h.workerBits()) {
                    throw bad("HELLO_OK region_bits " + h.regionBits() + " > worker_bits " + h.workerBits());
                }
                return h;
            }
            default:
                throw bad(String.format("unknown response opcode 0x%02x", opcode));
        }
    }
}
