package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import org.junit.jupiter.api.Test;

/** Protocol version 5: GET_IDS_WITH (after, idempotency keys, masking) and MASKED_IDS. */
class IdsWithTest {
    static final long EPOCH = 1767225600000L; // 2026-01-01T00:00:00Z, the default layout's epoch
    static final String MASK_KEYS = "7:000102030405060708090a0b0c0d0e0f,3:0f0e0d0c0b0a09080706050403020100";

    // ---- unit: the key -> node hash ----

    @Test
    void fnv1a64OfTheKeysBytes() {
        assertEquals(0xcbf29ce484222325L, IdgenClient.fnv1a64(new byte[0]));
        assertEquals(0xaf63dc4c8601ec8cL, IdgenClient.fnv1a64("a".getBytes(StandardCharsets.US_ASCII)));
        assertEquals(0x7d1deb86a05662d4L, IdgenClient.fnv1a64("order-42".getBytes(StandardCharsets.US_ASCII)));
    }

    @Test
    void aKeyPicksItsNodeByHashModuloTheNodeCount() {
        // Unsigned modulo: these hashes have the top bit set or not.
        assertEquals(0, IdgenClient.keyNodeIndex("order-42", 2));
        assertEquals(2, IdgenClient.keyNodeIndex("order-42", 3));
        assertEquals(4, IdgenClient.keyNodeIndex("order-42", 5));
        assertEquals(0, IdgenClient.keyNodeIndex("key-1", 2));
        assertEquals(1, IdgenClient.keyNodeIndex("key-2", 2));
        assertEquals(0, IdgenClient.keyNodeIndex("key-2", 3));
        assertEquals(1, IdgenClient.keyNodeIndex("~", 2));
        assertEquals(4, IdgenClient.keyNodeIndex("~", 5));
        assertThrows(IllegalArgumentException.class, () -> IdgenClient.keyNodeIndex("a b", 2));
    }

    @Test
    void optionsAreCheckedWhenBuilt() {
        assertThrows(IllegalArgumentException.class, () -> IdOptions.builder().idempotencyKey(""));
        assertThrows(IllegalArgumentException.class, () -> IdOptions.builder().idempotencyKey("x".repeat(65)));
        assertThrows(IllegalArgumentException.class, () -> IdOptions.after(-1));
        IdOptions o = IdOptions.builder().after(5).idempotencyKey("k").build();
        assertEquals(5L, o.after());
        assertEquals("k", o.key());
        assertEquals(null, IdOptions.NONE.after());
    }

    @Test
    void maskedStringsNeedNoKey() {
        MaskKeyring ring = MaskKeyring.parse(MASK_KEYS);
        long id = 123456789L;
        assertEquals(ring.maskString(id), MaskKeyring.maskedString(7, ring.mask(id)));
        String[] s = new MaskedIds(7, new long[] {ring.mask(id)}).strings();
        assertEquals(12, s[0].length());
        assertEquals(id, ring.unmaskString(s[0]));
    }

    // ---- against fake nodes: old versions, keyed requests not retried elsewhere ----

    @Test
    void aNodeBelowVersion5IsTooOldAndNothingIsSent() throws Exception {
        for (int version : new int[] {1, 4}) {
            try (Support.Fake old = new Support.Fake(Support.Mode.SERVE, 0, 0,
                    Support.helloOk(version, EPOCH, 0, 65536, 0, 1), null);
                    IdgenClient c = IdgenClient.create(old.addr)) {
                IdsWithUnsupportedException e = assertThrows(IdsWithUnsupportedException.class,
                        () -> c.nextIds(2, IdOptions.after(1)));
                assertEquals(version, e.version());
                assertTrue(e.getMessage().contains("too old"), e.getMessage());
                assertThrows(IdsWithUnsupportedException.class, () -> c.nextMaskedIds(1, IdOptions.NONE));
                assertThrows(IdsWithUnsupportedException.class, () -> c.nextId(IdOptions.idempotencyKey("k")));
                assertEquals(0, old.requests.get(), "nothing sent");
                assertEquals(3, c.nextIds(3).length, "the node still serves IDs");
            }
        }
    }

    @Test
    void aKeyedRequestIsNotRetriedOnAnotherNode() throws Exception {
        String dead = "127.0.0.1:" + Support.freePort();
        try (Support.Fake other = new Support.Fake(Support.Mode.SERVE, 0, 0,
                Support.helloOk(5, EPOCH, 0, 65536, 0, 1), null);
                IdgenClient c = IdgenClient.builder().nodes(dead, other.addr)
                        .connectTimeout(java.time.Duration.ofMillis(500)).build()) {
            assertEquals(dead, c.nodeForKey("key-1"));
            assertEquals(other.addr, c.nodeForKey("key-2"));
            KeyedRequestFailedException e = assertThrows(KeyedRequestFailedException.class,
                    () -> c.nextIds(2, IdOptions.idempotencyKey("key-1")));
            assertTrue(e.getMessage().contains("not retried on another node"), e.getMessage());
            assertEquals(dead, e.node());
            ExecutionException ee = assertThrows(ExecutionException.class,
                    () -> c.nextMaskedIdsAsync(1, IdOptions.idempotencyKey("key-1"), java.time.Duration.ofSeconds(5)).get());
            assertInstanceOf(KeyedRequestFailedException.class, ee.getCause());
            assertEquals(0, other.connections.get(), "the other node was never tried");
        }
    }

    // ---- against real nodes (IDGEN_BIN) ----

    @Test
    void afterAnIdSeenEveryIdIsGreater() throws Exception {
        try (Support.Node node = Support.Node.memory();
                IdgenClient c = IdgenClient.create(node.addr)) {
            long[] first = c.nextIds(5, IdOptions.NONE);
            assertEquals(5, c.nodes().get(0).hello().version());
            long last = first[first.length - 1];
            long[] next = c.nextIds(10, IdOptions.after(last));
            for (long id : next) {
                assertTrue(id > last, id + " after " + last);
            }
            long one = c.nextId(IdOptions.after(next[9]));
            assertTrue(one > next[9]);

            // An ID 400 ms ahead of now (the default layout: timestamp above 22 bits): answered
            // after the node's clock passed it (within its 1 s max_drift), greater.
            Frames.HelloOk h = c.nodes().get(0).hello();
            int shift = h.workerBits() + h.sequenceBits();
            long ahead = (System.currentTimeMillis() + 400 - h.epochMs()) << shift;
            long t0 = System.nanoTime();
            long[] later = c.nextIds(3, IdOptions.after(ahead));
            long waitedMs = (System.nanoTime() - t0) / 1_000_000;
            for (long id : later) {
                assertTrue(id > ahead, id + " after " + ahead);
            }
            assertTrue(waitedMs >= 200, "answered after " + waitedMs + " ms");
        }
    }

    @Test
    void aKeyOnANodeWithAnIdempotencyWindowGetsTheSameIdsAgain() throws Exception {
        try (Support.Node node = Support.Node.memory("--idempotency-window", "30s")) {
            long[] once;
            try (IdgenClient c = IdgenClient.create(node.addr)) {
                once = c.nextIds(4, IdOptions.idempotencyKey("order-42"));
                assertArrayEquals(once, c.nextIds(4, IdOptions.idempotencyKey("order-42")));
                assertNotEquals(once[0], c.nextIds(4, IdOptions.idempotencyKey("order-43"))[0]);
                ServerException e = assertThrows(ServerException.class,
                        () -> c.nextIds(5, IdOptions.idempotencyKey("order-42")));
                assertEquals(Status.IDEMPOTENCY_KEY_REUSED, e.status());
                assertEquals(4, c.nextIds(4).length, "the connection stays open");
            }
            try (IdgenClient c = IdgenClient.create(node.addr)) {
                assertArrayEquals(once, c.nextIds(4, IdOptions.idempotencyKey("order-42")), "on another connection");
            }
        }
    }

    @Test
    void maskedIdsUnmaskWithTheClientsKeyringToIncreasingIds() throws Exception {
        MaskKeyring ring = MaskKeyring.parse(MASK_KEYS);
        try (Support.Node node = Support.Node.memoryWithEnv(Map.of(MaskKeyring.ENV, MASK_KEYS));
                IdgenClient c = IdgenClient.create(node.addr)) {
            long before = c.nextId(IdOptions.NONE);
            MaskedIds m = c.nextMaskedIds(20, IdOptions.after(before));
            assertEquals(7, m.keyId());
            assertEquals(20, m.masked().length);
            String[] strings = m.strings();
            long prev = before;
            for (int i = 0; i < 20; i++) {
                long id = ring.unmask(m.masked()[i], m.keyId());
                assertTrue(id > prev, "unmasked IDs increase: " + id + " after " + prev);
                prev = id;
                assertEquals(12, strings[i].length());
                assertEquals('7', strings[i].charAt(0));
                assertEquals(id, ring.unmaskString(strings[i]));
            }
        }
    }

    @Test
    void aNodeWithoutKeysOrMaskingAnswersInvalidOption() throws Exception {
        try (Support.Node node = Support.Node.memory();
                IdgenClient c = IdgenClient.create(node.addr)) {
            ServerException e = assertThrows(ServerException.class, () -> c.nextMaskedIds(1, IdOptions.NONE));
            assertEquals(Status.INVALID_OPTION, e.status());
            assertEquals("INVALID_OPTION", Status.name(e.status()));
            e = assertThrows(ServerException.class, () -> c.nextIds(1, IdOptions.idempotencyKey("k")));
            assertEquals(Status.INVALID_OPTION, e.status());
            // An after far in the future (an hour) is not an ID the node may wait for.
            Frames.HelloOk h = c.nodes().get(0).hello();
            long farAhead = (System.currentTimeMillis() + 3_600_000 - h.epochMs()) << (h.workerBits() + h.sequenceBits());
            e = assertThrows(ServerException.class, () -> c.nextIds(1, IdOptions.after(farAhead)));
            assertEquals(Status.INVALID_OPTION, e.status());
            assertEquals(2, c.nextIds(2, IdOptions.NONE).length, "the connection stays open");
        }
    }
}
