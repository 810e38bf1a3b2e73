package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
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
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The shared wire vectors of protocol/tests/vectors.json through the client's codec, plus RANGES. */
class VectorsTest {
    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> vectors() throws Exception {
        return (List<Map<String, Object>>) Support.json("protocol/tests/vectors.json");
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
        }
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

    @Test
    void getRangesIsEncodedWithOpcode4() {
        assertArrayEquals(HexFormat.of().parseHex("000000050400001000"), Frames.getRanges(4096));
        assertArrayEquals(HexFormat.of().parseHex("00000009014944474e00010002"), Frames.hello(1, 2));
    }
}
