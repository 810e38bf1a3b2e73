package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.idgen.client.Frames.Decoded;
import dev.idgen.client.Frames.ErrorFrame;
import dev.idgen.client.Frames.Frame;
import dev.idgen.client.Frames.HelloOk;
import dev.idgen.client.Frames.Ids;
import dev.idgen.client.Frames.Pong;
import dev.idgen.client.Frames.Ranges;
import dev.idgen.client.Frames.Values;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The shared wire vectors of protocol/tests/vectors.json through the client's codec, plus
 * RANGES. Response vectors are decoded (or rejected, or found incomplete) as they say; request
 * vectors with {@code decoded} are encoded byte-exact, and sent only on a connection whose
 * negotiated {@code version} has the opcode; GET_VALUES request vectors the server rejects are
 * refused by the client's checks before sending (a client that never sends them cannot be
 * answered so). The other request error and incomplete vectors are the server's decoding.
 */
class VectorsTest {
    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> vectors() throws Exception {
        // Version 4's cases (GET_UUIDS, UUIDS) are a file of their own: a version 4 client passes both.
        List<Map<String, Object>> all = new ArrayList<>((List<Map<String, Object>>) Support.json("protocol/tests/vectors.json"));
        all.addAll((List<Map<String, Object>>) Support.json("protocol/tests/vectors_v4.json"));
        // Version 5's (GET_IDS_WITH, MASKED_IDS, statuses 205-207) likewise.
        all.addAll((List<Map<String, Object>>) Support.json("protocol/tests/vectors_v5.json"));
        return all;
    }

    static List<Map<String, Object>> cases(String direction, String key) throws Exception {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Map<String, Object> c : vectors()) {
            if (direction.equals(c.get("direction")) && c.containsKey(key)) {
                out.add(c);
            }
        }
        return out;
    }

    static byte[] hex(Map<String, Object> c) {
        return HexFormat.of().parseHex((String) c.get("hex"));
    }

    static long num(Object o) {
        return o instanceof String s ? Long.parseUnsignedLong(s) : ((Number) o).longValue();
    }

    @SuppressWarnings("unchecked")
    static byte[] encode(Map<String, Object> d) {
        return switch ((String) d.get("op")) {
            case "HELLO" -> Frames.hello((int) num(d.get("min_version")), (int) num(d.get("max_version")));
            case "GET_IDS" -> Frames.getIds(num(d.get("count")));
            case "GET_RANGES" -> Frames.getRanges(num(d.get("count")));
            case "PING" -> Frames.ping(num(d.get("token")));
            case "GET_VALUES" -> Frames.getValues(num(d.get("count")), (String) d.get("name"));
            case "GET_UUIDS" -> Frames.getUuids(num(d.get("count")));
            case "GET_IDS_WITH" -> Frames.getIdsWith(num(d.get("count")),
                    d.containsKey("after") ? Long.valueOf(num(d.get("after"))) : null,
                    (String) d.get("key"), Boolean.TRUE.equals(d.get("masked")));
            default -> throw new AssertionError("unknown request op " + d.get("op"));
        };
    }

    /** The client's decoded frame in the vectors' JSON shape. */
    static Map<String, Object> asDecoded(Frame f) {
        Map<String, Object> m = new LinkedHashMap<>();
        if (f instanceof HelloOk h) {
            m.put("op", "HELLO_OK");
            m.put("version", (long) h.version());
            m.put("epoch_ms", Long.toUnsignedString(h.epochMs()));
            m.put("timestamp_bits", (long) h.timestampBits());
            m.put("worker_bits", (long) h.workerBits());
            m.put("sequence_bits", (long) h.sequenceBits());
            m.put("region_bits", (long) h.regionBits());
            m.put("max_batch", h.maxBatch());
            m.put("max_request_frame", h.maxRequestFrame());
            m.put("worker_first", h.workerFirst());
            m.put("worker_count", h.workerCount());
            m.put("shard", (long) h.shard());
        } else if (f instanceof Ids ids) {
            m.put("op", "IDS");
            List<Object> l = new ArrayList<>();
            for (long id : ids.ids()) {
                l.add(Long.toString(id));
            }
            m.put("ids", l);
        } else if (f instanceof Values v) {
            m.put("op", "VALUES");
            m.put("mode", v.mode() == SequenceMode.DENSE ? "dense" : "strict");
            List<Object> l = new ArrayList<>();
            for (long value : v.values()) {
                l.add(Long.toString(value));
            }
            m.put("values", l);
        } else if (f instanceof Frames.Uuids u) {
            m.put("op", "UUIDS");
            List<Object> l = new ArrayList<>();
            for (java.util.UUID uuid : u.uuids()) {
                l.add(uuid.toString().replace("-", ""));
            }
            m.put("uuids", l);
        } else if (f instanceof Frames.MaskedIds mi) {
            m.put("op", "MASKED_IDS");
            m.put("key_id", (long) mi.keyId());
            List<Object> l = new ArrayList<>();
            for (long v : mi.masked()) {
                l.add(Long.toString(v));
            }
            m.put("ids", l);
        } else if (f instanceof Pong p) {
            m.put("op", "PONG");
            m.put("token", Long.toUnsignedString(p.token()));
        } else if (f instanceof ErrorFrame e) {
            m.put("op", "ERROR");
            m.put("status", (long) e.status());
            m.put("name", e.name());
            m.put("message", e.message());
            m.put("closes", e.closes());
            m.put("retry_elsewhere", e.retryElsewhere());
        } else {
            throw new AssertionError("unexpected frame " + f);
        }
        return m;
    }

    @Test
    @SuppressWarnings("unchecked")
    void everyRequestVectorWithDecodedIsEncodedByteExact() throws Exception {
        List<Map<String, Object>> cs = cases("request", "decoded");
        assertTrue(cs.size() >= 10, "request vectors: " + cs.size());
        for (Map<String, Object> c : cs) {
            byte[] raw = hex(c);
            int consumed = c.containsKey("consumed") ? (int) num(c.get("consumed")) : raw.length;
            byte[] want = java.util.Arrays.copyOf(raw, consumed);
            assertArrayEquals(want, encode((Map<String, Object>) c.get("decoded")), (String) c.get("name"));
            if ("established".equals(c.get("connection"))) {
                int opcode = raw[4] & 0xFF;
                assertTrue(Frames.requestVersion(opcode) <= version(c),
                        c.get("name") + ": the client sends opcode " + opcode + " only from version "
                                + Frames.requestVersion(opcode));
            }
        }
    }

    /** The version an established connection of a request vector negotiated (1 when absent). */
    static int version(Map<String, Object> c) {
        return c.containsKey("version") ? (int) num(c.get("version")) : 1;
    }

    @SuppressWarnings("unchecked")
    static long limit(Map<String, Object> c, String key) {
        return num(((Map<String, Object>) c.get("limits")).get(key));
    }

    @Test
    @SuppressWarnings("unchecked")
    void opcodesUnknownAtANegotiatedVersionAreNeverSentOnIt() throws Exception {
        int n = 0;
        for (Map<String, Object> c : cases("request", "error")) {
            Map<String, Object> err = (Map<String, Object>) c.get("error");
            byte[] raw = hex(c);
            if (!"established".equals(c.get("connection")) || num(err.get("status")) != Status.UNKNOWN_OPCODE
                    || raw.length < 5) {
                continue;
            }
            int opcode = raw[4] & 0xFF;
            if (opcode == Frames.OP_GET_RANGES || opcode == Frames.OP_GET_VALUES) {
                n++;
                assertTrue(Frames.requestVersion(opcode) > version(c), (String) c.get("name"));
            }
        }
        assertTrue(n >= 3, "GET_RANGES on version 1, GET_VALUES on versions 1 and 2: " + n);
    }

    /**
     * Every GET_VALUES request vector through the client's checks before sending, with the
     * vector's negotiated version and limits: a frame the server accepts passes them; one it
     * rejects is refused without sending (a bad count, name, length or frame size is an
     * IllegalArgumentException; a version below 3 a SequencesUnsupportedException).
     */
    @Test
    @SuppressWarnings("unchecked")
    void getValuesRequestVectorsMatchTheChecksBeforeSending() throws Exception {
        int accepted = 0;
        int refused = 0;
        for (Map<String, Object> c : vectors()) {
            byte[] raw = hex(c);
            if (!"request".equals(c.get("direction")) || raw.length < 5 || (raw[4] & 0xFF) != Frames.OP_GET_VALUES
                    || c.containsKey("incomplete")) {
                continue;
            }
            String name = (String) c.get("name");
            long length = ByteBuffer.wrap(raw).getInt() & 0xFFFFFFFFL;
            long count = raw.length >= 9 ? ByteBuffer.wrap(raw).getInt(5) & 0xFFFFFFFFL : 1;
            int nameLen = (int) Math.max(0, length - 5);
            byte[] seq = new byte[nameLen];
            int have = Math.max(0, Math.min(nameLen, raw.length - 9));
            System.arraycopy(raw, Math.min(9, raw.length), seq, 0, have);
            assertEquals(nameLen, have, name + ": the vector holds the whole name");
            int v = version(c);
            long maxBatch = limit(c, "max_batch");
            long maxFrame = limit(c, "max_request_frame");
            if (c.containsKey("decoded")) {
                Frames.checkGetValues(v, maxBatch, maxFrame, count, seq, "vector");
                accepted++;
                continue;
            }
            Map<String, Object> err = (Map<String, Object>) c.get("error");
            int status = (int) num(err.get("status"));
            RuntimeException e = assertThrows(RuntimeException.class,
                    () -> Frames.checkGetValues(v, maxBatch, maxFrame, count, seq, "vector"), name);
            refused++;
            String m = e.getMessage();
            switch (status) {
                case Status.UNKNOWN_OPCODE -> {
                    SequencesUnsupportedException u = assertInstanceOf(SequencesUnsupportedException.class, e, name);
                    assertEquals(v, u.version(), name);
                    assertTrue(m.contains("version " + v) && m.contains("need version 3"), m);
                }
                case Status.INVALID_COUNT, Status.BATCH_TOO_LARGE -> {
                    assertInstanceOf(IllegalArgumentException.class, e, name);
                    assertTrue(m.startsWith("n "), name + ": " + m);
                }
                case Status.INVALID_SEQUENCE_NAME, Status.BAD_FRAME -> {
                    assertInstanceOf(IllegalArgumentException.class, e, name);
                    assertTrue(m.contains("sequence name"), name + ": " + m);
                }
                case Status.FRAME_TOO_LARGE -> {
                    assertInstanceOf(IllegalArgumentException.class, e, name);
                    assertTrue(m.contains("max_request_frame " + maxFrame), name + ": " + m);
                }
                default -> throw new AssertionError(name + ": no client check stands for status " + status);
            }
        }
        assertTrue(accepted >= 4 && refused >= 12, accepted + " accepted, " + refused + " refused");
    }

    @Test
    void everyResponseVectorWithDecodedDecodesToTheSameValues() throws Exception {
        List<Map<String, Object>> cs = cases("response", "decoded");
        assertTrue(cs.size() >= 15);
        for (Map<String, Object> c : cs) {
            byte[] raw = hex(c);
            Decoded d = Frames.decodeResponse(raw, num(c.get("max_frame")));
            assertNotNull(d, c.get("name") + ": decoder asked for more bytes");
            int consumed = c.containsKey("consumed") ? (int) num(c.get("consumed")) : raw.length;
            assertEquals(consumed, d.consumed(), (String) c.get("name"));
            assertEquals(c.get("decoded"), asDecoded(d.frame()), (String) c.get("name"));
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void everyResponseVectorWithErrorIsRejectedWithItsStatus() throws Exception {
        List<Map<String, Object>> cs = cases("response", "error");
        assertTrue(cs.size() >= 10);
        for (Map<String, Object> c : cs) {
            Map<String, Object> err = (Map<String, Object>) c.get("error");
            ProtocolException e = assertThrows(ProtocolException.class,
                    () -> Frames.decodeResponse(hex(c), num(c.get("max_frame"))), (String) c.get("name"));
            assertEquals(num(err.get("status")), e.status(), c.get("name") + ": " + e.getMessage());
            assertEquals(Boolean.TRUE, err.get("closes"), "a client drops the connection");
        }
    }

    @Test
    void everyIncompleteResponseVectorAsksForMore() throws Exception {
        int n = 0;
        for (Map<String, Object> c : cases("response", "incomplete")) {
            assertNull(Frames.decodeResponse(hex(c), num(c.get("max_frame"))), (String) c.get("name"));
            n++;
        }
        assertTrue(n >= 2);
    }

    @Test
    void framesFedOneByteAtATimeDecodeOnceComplete() throws Exception {
        for (Map<String, Object> c : cases("response", "decoded")) {
            byte[] raw = hex(c);
            long max = num(c.get("max_frame"));
            int consumed = c.containsKey("consumed") ? (int) num(c.get("consumed")) : raw.length;
            for (int cut = 0; cut < consumed; cut++) {
                assertNull(Frames.decodeResponse(raw, 0, cut, max), c.get("name") + " cut at " + cut);
            }
            assertNotNull(Frames.decodeResponse(raw, 0, consumed, max));
        }
    }

    @Test
    void oversizedLengthIsRejectedFromThePrefixAlone() {
        ProtocolException e = assertThrows(ProtocolException.class, () -> Frames.decodeResponse(
                new byte[] {(byte) 0xFF, (byte) 0xFF, (byte) 0xFF, (byte) 0xFF}, Frames.DEFAULT_MAX_RESPONSE_FRAME));
        assertEquals(101, e.status());
    }

    @Test
    void unknownCodesFollowTheirClass() {
        assertFalse(Status.closesConnection(299) || Status.retryElsewhere(299));
        assertTrue(Status.retryElsewhere(399) && !Status.closesConnection(399));
        assertTrue(Status.closesConnection(499) && !Status.retryElsewhere(499));
        assertTrue(Status.closesConnection(100) && Status.closesConnection(600));
        assertFalse(Status.retryElsewhere(Status.EXHAUSTED));
    }

    @Test
    void theStatusTableMatchesProtocolMd() throws Exception {
        String text = Files.readString(Support.repo().resolve("protocol/PROTOCOL.md"));
        String table = text.split("<!-- status-table:begin -->")[1].split("<!-- status-table:end -->")[0];
        int rows = 0;
        for (String row : table.split("\n")) {
            if (!row.startsWith("| `")) {
                continue;
            }
            rows++;
            String[] cells = row.substring(1).split("\\|");
            int code = Integer.parseInt(cells[0].trim().replace("`", ""));
            Status.Info info = Status.table().get(code);
            assertNotNull(info, row);
            assertEquals(cells[1].trim().replace("`", ""), info.name(), row);
            assertEquals(cells[2].trim().equals("yes"), info.closesConnection(), row);
            assertEquals(cells[3].trim().equals("yes"), info.retryElsewhere(), row);
        }
        assertEquals(Status.table().size(), rows);
    }

    // ---- RANGES (version 2): not in the shared vectors; the rules of PROTOCOL.md 4.5 ----

    static byte[] ranges(long total, long[][] runs) {
        ByteBuffer b = ByteBuffer.allocate(13 + 12 * runs.length).putInt(9 + 12 * runs.length).put((byte) 0x84)
                .putInt((int) total).putInt(runs.length);
        for (long[] r : runs) {
            b.putLong(r[0]).putInt((int) r[1]);
        }
        return b.array();
    }

    @Test
    void rangesOfTheProtocolExampleExpandTo8192ConsecutiveIds() {
        byte[] raw = HexFormat.of().parseHex("00000015840000200000000001000000000000000000002000");
        Decoded d = Frames.decodeResponse(raw, Frames.DEFAULT_MAX_RESPONSE_FRAME);
        Ranges r = (Ranges) d.frame();
        assertEquals(raw.length, d.consumed());
        long[] ids = r.expand();
        assertEquals(8192, ids.length);
        for (int i = 0; i < ids.length; i++) {
            assertEquals(i, ids[i]);
        }
    }

    @Test
    void rangesWithSeveralRunsExpandInOrder() {
        Ranges r = (Ranges) Frames.decodeResponse(ranges(5, new long[][] {{10, 2}, {100, 3}}), 1 << 20).frame();
        assertArrayEquals(new long[] {10, 11, 100, 101, 102}, r.expand());
    }

    @Test
    void badRangesAreRejectedAsBadFrame() {
        List<byte[]> bad = List.of(
                ranges(0, new long[][] {}), // no run
                ranges(3, new long[][] {{10, 0}, {20, 3}}), // a run of count 0
                ranges(4, new long[][] {{10, 2}, {11, 2}}), // overlapping
                ranges(4, new long[][] {{20, 2}, {10, 2}}), // decreasing
                ranges(5, new long[][] {{10, 2}, {20, 2}}), // total disagrees
                ranges(2, new long[][] {{Long.MAX_VALUE, 2}}), // runs past 2^63
                ranges(1, new long[][] {{-1L, 1}}), // top bit set
                java.util.Arrays.copyOf(ranges(2, new long[][] {{1, 2}}), 24)); // length not 9 + 12k
        for (byte[] b : bad) {
            // A truncated copy keeps its original length prefix: fix it to the bytes present.
            if (b.length == 24) {
                ByteBuffer.wrap(b).putInt(0, 20);
            }
            ProtocolException e = assertThrows(ProtocolException.class, () -> Frames.decodeResponse(b, 1 << 20),
                    HexFormat.of().formatHex(b));
            assertEquals(Status.BAD_FRAME, e.status());
        }
        // Runs disagreeing with the length.
        byte[] wrongRuns = ranges(2, new long[][] {{1, 2}});
        ByteBuffer.wrap(wrongRuns).putInt(9, 2);
        assertEquals(Status.BAD_FRAME,
                assertThrows(ProtocolException.class, () -> Frames.decodeResponse(wrongRuns, 1 << 20)).status());
    }

    // ---- VALUES (version 3) beyond the shared vectors ----

    @Test
    void aValuesOfMaxBatchValuesFitsTheResponseLimit() {
        // 6 + 8 * max_batch (PROTOCOL.md section 7): one byte above an IDS of max_batch.
        long[] vs = new long[40];
        for (int i = 0; i < vs.length; i++) {
            vs[i] = 100 + 3 * i;
        }
        byte[] raw = Support.values(1, vs);
        Values v = (Values) Frames.decodeResponse(raw, Frames.responseFrameLimit(40)).frame();
        assertEquals(SequenceMode.STRICT, v.mode());
        assertArrayEquals(vs, v.values());
        assertEquals(Status.FRAME_TOO_LARGE, assertThrows(ProtocolException.class,
                () -> Frames.decodeResponse(raw, Frames.responseFrameLimit(39))).status());
        assertEquals(6 + 8 * 65536, Frames.responseFrameLimit(65536));
        assertEquals(524294, Frames.DEFAULT_MAX_RESPONSE_FRAME);
        assertEquals(258, Frames.responseFrameLimit(1));
    }

    @Test
    void valuesModeAndCountAreCheckedBeforeTheValuesArrive() {
        byte[] raw = Support.values(0, 1, 2, 3);
        assertNull(Frames.decodeResponse(raw, 0, 10, 1 << 20), "mode and count fine: wait for the values");
        ByteBuffer.wrap(raw).putInt(6, 4); // count 4 in a frame of 3
        assertEquals(Status.BAD_FRAME,
                assertThrows(ProtocolException.class, () -> Frames.decodeResponse(raw, 0, 10, 1 << 20)).status());
        byte[] mode9 = Support.values(9, 1);
        assertEquals(Status.BAD_FRAME,
                assertThrows(ProtocolException.class, () -> Frames.decodeResponse(mode9, 0, 6, 1 << 20)).status());
        assertEquals(Status.BAD_FRAME, assertThrows(ProtocolException.class,
                () -> Frames.decodeResponse(Support.values(0, Long.MIN_VALUE + 5), 1 << 20)).status());
        assertEquals(Status.BAD_FRAME, assertThrows(ProtocolException.class,
                () -> Frames.decodeResponse(Support.values(0, 7, 3), 1 << 20)).status());
    }

    @Test
    void getIdsWithRefusesKeysAndAftersTheServerWouldRefuse() {
        for (String bad : new String[] {"", "a b", "x".repeat(65), "caf\u00e9", "tab\t", "\u007f"}) {
            assertThrows(IllegalArgumentException.class, () -> Frames.getIdsWith(1, null, bad, false), bad);
        }
        assertThrows(IllegalArgumentException.class, () -> Frames.getIdsWith(1, -1L, null, false));
        assertEquals(4 + 6 + 8 + 1 + 64, Frames.getIdsWith(1, 5L, "~".repeat(64), true).length);
        assertEquals(Frames.IDS_WITH_VERSION, Frames.requestVersion(Frames.OP_GET_IDS_WITH));
    }

    @Test
    void maskedIdsCountIsCheckedAndKeyIdBounded() {
        // key 0, count 1, value 7: decodes; key 62 is BAD_FRAME.
        byte[] ok = HexFormat.of().parseHex("0000000e8700000000010000000000000007");
        Frames.MaskedIds m = (Frames.MaskedIds) Frames.decodeResponse(ok, 1 << 20).frame();
        assertEquals(0, m.keyId());
        assertArrayEquals(new long[] {7}, m.masked());
        byte[] k62 = ok.clone();
        k62[5] = 62;
        assertEquals(Status.BAD_FRAME,
                assertThrows(ProtocolException.class, () -> Frames.decodeResponse(k62, 1 << 20)).status());
        for (int cut = 0; cut < ok.length; cut++) {
            assertNull(Frames.decodeResponse(ok, 0, cut, 1 << 20));
        }
    }

    @Test
    void getValuesIsEncodedAsSection11_5() {
        assertArrayEquals(HexFormat.of().parseHex("0000000b05000000026f7264657273"), Frames.getValues(2, "orders"));
        // vectors_v5.json's hello_range_1_to_5_picks_5: this client offers 1..=5.
        assertArrayEquals(HexFormat.of().parseHex("00000009014944474e00010005"),
                Frames.hello(Frames.MIN_VERSION, Frames.MAX_VERSION));
        for (String bad : new String[] {"", "Orders", ".orders", "-x", "_x", "a b", "a/b", "café", "a\0",
                "x".repeat(65)}) {
            assertThrows(IllegalArgumentException.class, () -> Frames.getValues(1, bad), bad);
        }
        assertThrows(IllegalArgumentException.class, () -> Frames.getValues(1, null));
        for (String good : new String[] {"a", "0", "invoice.tenant-42", "a_b", "z".repeat(64), "9-._"}) {
            assertEquals(9 + good.length(), Frames.getValues(1, good).length, good);
        }
    }

    // ---- UUIDS (version 4) beyond the shared vectors ----

    @Test
    void aUuidsOfMaxBatchUuidsFitsTheVersion4ResponseLimit() {
        assertEquals(5 + 16 * 65536L, Frames.responseFrameLimit(65536, 4));
        assertEquals(6 + 8 * 65536L, Frames.responseFrameLimit(65536, 3));
        assertEquals(258, Frames.responseFrameLimit(1, 4));
    }

    @Test
    void uuidsCountIsCheckedBeforeTheUuidsArrive() {
        byte[] head = ByteBuffer.allocate(9).putInt(5 + 16 * 1000).put((byte) 0x86).putInt(999).array();
        assertEquals(Status.BAD_FRAME,
                assertThrows(ProtocolException.class, () -> Frames.decodeResponse(head, 1 << 20)).status());
        byte[] ok = ByteBuffer.allocate(9).putInt(5 + 16 * 1000).put((byte) 0x86).putInt(1000).array();
        assertNull(Frames.decodeResponse(ok, 1 << 20));
    }

    @Test
    void uuidsAboveTheSignBitAreOrderedUnsigned() {
        // java.util.UUID.compareTo compares signed halves: 0x8... would sort below 0x0....
        java.util.UUID low = new java.util.UUID(0x019b71b44c7b7800L, 0x8000123456789abcL);
        java.util.UUID high = new java.util.UUID(0x819b71b44c7b7800L, 0x8000123456789abcL);
        assertTrue(Frames.uuidBelow(low, high));
        assertFalse(Frames.uuidBelow(high, low));
        assertFalse(Frames.uuidBelow(low, low));
        byte[] frame = Support.uuids(low, high);
        assertEquals(2, ((Frames.Uuids) Frames.decodeResponse(frame, 1 << 20).frame()).uuids().length);
    }

    @Test
    void getRangesIsEncodedWithOpcode4() {
        assertArrayEquals(HexFormat.of().parseHex("000000050400001000"), Frames.getRanges(4096));
        assertArrayEquals(HexFormat.of().parseHex("00000009014944474e00010002"), Frames.hello(1, 2));
    }
}
