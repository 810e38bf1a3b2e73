package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.function.LongFunction;
import org.junit.jupiter.api.Test;

/**
 * Version 7 UUIDs (protocol version 4, GET_UUIDS) against fake nodes and a real one: the calls,
 * the checks before sending, the checks of each UUIDS answer, failover, and taking a UUID apart.
 */
class UuidsTest {
    static final long EPOCH = 1767225600000L;

    static byte[] v4(long maxBatch) {
        return Support.helloOk(4, EPOCH, 0, maxBatch, 0, 1);
    }

    static Support.Fake serving(long maxBatch) throws Exception {
        return new Support.Fake(Support.Mode.SERVE, 0, 0, v4(maxBatch), null);
    }

    static UUID uuidOf(long id, long random) {
        return Support.uuidOf(EPOCH, 10, 12, id, random);
    }

    static void assertIncreasing(UUID[] us) {
        for (int i = 1; i < us.length; i++) {
            assertTrue(Frames.uuidBelow(us[i - 1], us[i]), "not increasing at " + i);
        }
    }

    @Test
    void uuidsAreJavaUuidsOfVersion7MadeFromTheIdsSent() throws Exception {
        try (Support.Fake f = serving(10); IdgenClient c = IdgenClient.create(f.addr)) {
            UUID one = c.nextUuid();
            UUID[] many = c.nextUuids(25); // above max_batch: 10 + 10 + 5, pipelined, joined
            assertEquals(25, many.length);
            List<UUID> all = new ArrayList<>();
            all.add(one);
            all.addAll(Arrays.asList(many));
            assertIncreasing(all.toArray(new UUID[0]));
            List<Long> sent;
            synchronized (f.uuidIds) {
                sent = new ArrayList<>(f.uuidIds);
            }
            assertEquals(26, sent.size());
            for (int i = 0; i < all.size(); i++) {
                UUID u = all.get(i);
                assertEquals(7, u.version(), u.toString());
                assertEquals(2, u.variant(), u.toString());
                assertEquals(uuidOf(sent.get(i), sent.get(i) * 0x9E3779B97F4A7C15L), u);
                assertEquals(sent.get(i), c.decodeUuid(u).id());
            }
            assertEquals(4, c.stats().uuidRequests());
            assertEquals(26, c.stats().uuids());
            assertEquals(4, c.nodes().get(0).hello().version());
            assertEquals(3, c.nextIds(3).length, "IDs on the same version 4 connection");
            assertEquals(1, c.stats().connects());
        }
    }

    @Test
    void aNodeBelowVersion4IsRefusedWithoutSendingOrTryingAnother() throws Exception {
        for (int version : new int[] {1, 2, 3}) {
            try (Support.Fake old = new Support.Fake(Support.Mode.SERVE, 0, 0,
                    Support.helloOk(version, EPOCH, 0, 65536, 0, 1), null);
                    Support.Fake current = serving(65536);
                    IdgenClient c = IdgenClient.create(old.addr, current.addr)) {
                UuidsUnsupportedException e = assertThrows(UuidsUnsupportedException.class, () -> c.nextUuids(5));
                assertEquals(version, e.version());
                assertEquals(old.addr, e.node());
                assertTrue(e.getMessage().contains("speaks protocol version " + version + "; UUIDs need protocol version 4"),
                        e.getMessage());
                ExecutionException ee = assertThrows(ExecutionException.class, () -> c.nextUuidAsync().get());
                assertInstanceOf(UuidsUnsupportedException.class, ee.getCause());
                assertEquals(0, old.requests.get(), "nothing sent");
                assertEquals(0, current.connections.get(), "no other node tried");
                assertEquals(0, c.stats().nodeFailures());
                assertEquals(3, c.nextIds(3).length, "the node still serves IDs");
            }
        }
    }

    @Test
    void badCountsAreRefusedBeforeSending() throws Exception {
        try (Support.Fake f = serving(65536); IdgenClient c = IdgenClient.create(f.addr)) {
            for (int n : new int[] {0, -1, (1 << 24) + 1}) {
                assertThrows(IllegalArgumentException.class, () -> c.nextUuids(n), Integer.toString(n));
            }
            assertEquals(0, f.connections.get());
        }
    }

    @Test
    void badUuidsAnswersAreProtocolErrorsAndFailOver() throws Exception {
        UUID[] good = {uuidOf((1L << 40), 5), uuidOf((1L << 40) + 1, 5), uuidOf((1L << 40) + 2, 5)};
        UUID version4 = new UUID((good[0].getMostSignificantBits() & ~0xF000L) | 0x4000L, good[0].getLeastSignificantBits());
        UUID variant11 = new UUID(good[0].getMostSignificantBits(), good[0].getLeastSignificantBits() | 0xC000000000000000L);
        Map<String, LongFunction<byte[]>> cases = new LinkedHashMap<>();
        cases.put("too few", n -> Support.uuids(Arrays.copyOf(good, (int) n - 1)));
        cases.put("too many", n -> Support.uuids(Arrays.copyOf(good, (int) n + 1)));
        cases.put("version 4", n -> Support.uuids(version4, good[1]));
        cases.put("variant 11", n -> Support.uuids(variant11, good[1]));
        cases.put("decreasing", n -> Support.uuids(good[1], good[0]));
        cases.put("IDS instead", n -> ByteBuffer.allocate(9 + 16).putInt(5 + 16).put((byte) 0x82).putInt(2)
                .putLong(1).putLong(2).array());
        cases.put("count disagrees with length", n -> {
            byte[] b = Support.uuids(good[0], good[1]);
            ByteBuffer.wrap(b).putInt(5, 3);
            return b;
        });
        for (Map.Entry<String, LongFunction<byte[]>> k : cases.entrySet()) {
            try (Support.Fake bad = serving(65536); Support.Fake healthy = serving(65536)) {
                bad.uuidAnswer = k.getValue();
                try (IdgenClient alone = IdgenClient.create(bad.addr)) {
                    ProtocolException e = assertThrows(ProtocolException.class, () -> alone.nextUuids(2), k.getKey());
                    assertEquals(bad.addr, e.node(), k.getKey());
                    assertTrue(alone.nodes().get(0).failures() > 0, k.getKey() + ": the node is marked down");
                }
                try (IdgenClient both = IdgenClient.create(bad.addr, healthy.addr)) {
                    assertEquals(2, both.nextUuids(2).length, k.getKey());
                    assertEquals(1, both.stats().failovers(), k.getKey());
                }
            }
        }
    }

    @Test
    void uuidsMustIncreaseAcrossTheFramesOfOneConnection() throws Exception {
        UUID same = uuidOf(1L << 40, 0);
        try (Support.Fake f = serving(65536); IdgenClient c = IdgenClient.create(f.addr)) {
            f.uuidAnswer = n -> Support.uuids(same);
            assertEquals(same, c.nextUuid());
            ProtocolException e = assertThrows(ProtocolException.class, c::nextUuid);
            assertTrue(e.getMessage().contains("not increasing"), e.getMessage());
        }
    }

    @Test
    void decodeUuidTakesTheWorkedExampleApartAndSaysWhichCheckFailed() {
        // PROTOCOL.md 11.1 and 11.6: the layout of the worked examples and its UUIDs.
        Layout l = new Layout(1704067200000L, 41, 10, 12, 0);
        Layout.UuidParts first = l.decodeUuid(UUID.fromString("019b71b4-4c7b-7800-8000-123456789abc"));
        assertEquals(264543142405996544L, first.id());
        assertEquals(new Layout.Parts(1767139200123L, 63072000123L, 512, 0, 0), first.parts());
        assertEquals(264543142405996545L, l.decodeUuid(UUID.fromString("019b71b4-4c7b-7800-801f-edcba9876543")).id());
        Map<String, String> bad = Map.of(
                "019b71b4-4c7b-4800-8000-123456789abc", "version 4",
                "019b71b4-4c7b-7800-c000-123456789abc", "variant",
                "00000000-0001-7000-8000-000000000000", "before the epoch",
                "ffffffff-ffff-7000-8000-000000000000", "past the layout");
        for (Map.Entry<String, String> k : bad.entrySet()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> l.decodeUuid(UUID.fromString(k.getKey())), k.getKey());
            assertTrue(e.getMessage().contains(k.getValue()), e.getMessage());
        }
        assertThrows(NullPointerException.class, () -> l.decodeUuid(null));
    }

    @Test
    void decodeUuidInvertsTheMappingOverSeveralLayouts() {
        int[][] layouts = {{41, 10, 12}, {39, 8, 16}, {31, 16, 16}, {1, 31, 31}, {55, 4, 4}};
        for (int[] t : layouts) {
            Layout l = new Layout(EPOCH, t[0], t[1], t[2], 0);
            // Times within 2^40 ms of the epoch: a UUID's 48-bit time holds them.
            long keep = t[1] + t[2] + 40 >= 63 ? Long.MAX_VALUE : (1L << (t[1] + t[2] + 40)) - 1;
            for (long id : new long[] {0, 1, Long.MAX_VALUE & keep, 0x0123456789ABCDEFL & keep}) {
                UUID u = Support.uuidOf(EPOCH, t[1], t[2], id, -1L);
                Layout.UuidParts p = l.decodeUuid(u);
                assertEquals(id, p.id(), Arrays.toString(t) + " " + id);
                assertEquals(l.decode(id), p.parts());
            }
        }
    }

    @Test
    void aRealNodeHandsOutIncreasingUuidsMadeFromTheConnectionsIds() throws Exception {
        try (Support.Node node = Support.Node.memory("--max-batch", "1000");
                IdgenClient c = IdgenClient.create(node.addr)) {
            long before = c.nextId();
            UUID one = c.nextUuid();
            UUID[] many = c.nextUuids(2500); // three GET_UUIDS, joined
            long after = c.nextId();
            UUID[] all = new UUID[2501];
            all[0] = one;
            System.arraycopy(many, 0, all, 1, 2500);
            assertIncreasing(all);
            assertEquals(5, c.nodes().get(0).hello().version());
            long last = before;
            for (UUID u : all) {
                assertEquals(7, u.version());
                long id = c.decodeUuid(u).id();
                assertTrue(id > last, "made from the connection's next IDs");
                last = id;
            }
            assertTrue(after > last);
            Layout.Parts p = c.decodeUuid(one).parts();
            assertTrue(Math.abs(p.unixMs() - System.currentTimeMillis()) < 60_000, "made now: " + p);
            assertEquals(2501, c.stats().uuids());
        }
    }
}
