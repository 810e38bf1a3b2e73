package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Named sequences against a real node (clients/vectors/SEQUENCES.md): sequences created with
 * {@code idgen seq create ... --data-dir DIR} before {@code idgen serve --data-dir DIR} (the
 * embedded store) starts. Fails, never skips, without the server binary.
 */
class SequencesRealNodeTest {
    static Support.Node node;

    @BeforeAll
    static void start() throws Exception {
        node = Support.Node.embedded(dir -> {
            String d = dir.toString();
            Support.idgen("seq", "create", "orders", "--data-dir", d);
            Support.idgen("seq", "create", "ledger", "--mode", "strict", "--data-dir", d);
            Support.idgen("seq", "create", "tiny", "--max", "5", "--data-dir", d);
            // Each test takes its own sequence, so the tests do not depend on their order.
            Support.idgen("seq", "create", "orders.prefetch", "--data-dir", d);
            Support.idgen("seq", "create", "orders.threads", "--data-dir", d);
            Support.idgen("seq", "create", "ledger.prefetch", "--mode", "strict", "--data-dir", d);
        });
    }

    @AfterAll
    static void stop() {
        if (node != null) {
            node.close();
        }
    }

    static void assertIncreasing(long[] vs, String what) {
        for (int i = 1; i < vs.length; i++) {
            assertTrue(vs[i - 1] < vs[i], what + ": not increasing at " + i);
        }
    }

    /** Sequential calls of one client: single values, batches and pipelined async calls. */
    static List<Long> takeMixed(IdgenClient c, String name) throws Exception {
        List<Long> got = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            got.add(c.nextValue(name));
        }
        for (int i = 0; i < 20; i++) {
            long[] vs = c.nextValues(name, 25);
            assertEquals(25, vs.length);
            assertIncreasing(vs, name);
            for (long v : vs) {
                got.add(v);
            }
        }
        List<CompletableFuture<long[]>> fs = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            fs.add(c.nextValuesAsync(name, 1 + i % 4));
        }
        Set<Long> seen = new HashSet<>(got);
        for (CompletableFuture<long[]> f : fs) {
            long[] vs = f.get(20, TimeUnit.SECONDS);
            assertIncreasing(vs, name);
            for (long v : vs) {
                assertTrue(seen.add(v), name + ": value " + v + " twice");
                assertTrue(v >= 1, name + ": value " + v);
            }
        }
        return got;
    }

    @Test
    void aDenseAndAStrictSequenceGiveUniqueIncreasingValuesOverVersion3() throws Exception {
        for (String name : new String[] {"orders", "ledger"}) {
            try (IdgenClient c = IdgenClient.create(node.addr)) {
                List<Long> got = takeMixed(c, name);
                assertEquals(5, c.nodes().get(0).hello().version(), "the node speaks version 5 (sequences since 3)");
                assertEquals(50 + 500, got.size());
                for (int i = 1; i < got.size(); i++) {
                    assertTrue(got.get(i - 1) < got.get(i), name + ": one client's successive calls increase at " + i);
                }
                assertTrue(got.get(0) >= 1);
                assertEquals(1, c.stats().connects());
                assertEquals(50 + 20 + 100, c.stats().valueRequests());
            }
        }
    }

    @Test
    void anUnknownNameFailsWithUnknownSequenceAndTheConnectionStays() {
        try (IdgenClient c = IdgenClient.create(node.addr)) {
            ServerException e = assertThrows(ServerException.class, () -> c.nextValue("no-such-sequence"));
            assertEquals(Status.UNKNOWN_SEQUENCE, e.status());
            assertEquals("UNKNOWN_SEQUENCE", e.statusName());
            assertEquals(Status.UNKNOWN_SEQUENCE,
                    assertThrows(ServerException.class, () -> c.nextValues("nope", 3)).status());
            assertTrue(c.nextValue("orders") >= 1, "the connection stays usable");
            assertEquals(1, c.stats().connects());
            assertEquals(0, c.stats().nodeFailures());
        }
    }

    @Test
    void aBadNameOrCountFailsBeforeSending() {
        try (IdgenClient c = IdgenClient.create(node.addr)) {
            for (String bad : new String[] {"Orders", "", ".orders", "or ders", "x".repeat(65)}) {
                assertThrows(IllegalArgumentException.class, () -> c.nextValue(bad), bad);
            }
            assertThrows(IllegalArgumentException.class, () -> c.nextValues("orders", 0));
            assertThrows(IllegalArgumentException.class, () -> c.nextValues("orders", (1 << 20) + 1));
            assertEquals(0, c.stats().connects(), "nothing sent");
            assertEquals(0, c.stats().valueRequests());
            // Above the node's max_batch (65536 by default): refused on the connection, unsent.
            assertThrows(IllegalArgumentException.class, () -> c.nextValues("orders", 65537));
            assertEquals(0, c.stats().valueRequests());
        }
    }

    @Test
    void aSequenceWithASmallMaxFailsWithSequenceUsedUpOnceUsedUp() {
        try (IdgenClient c = IdgenClient.create(node.addr)) {
            long[] got = new long[5];
            for (int i = 0; i < 5; i++) {
                got[i] = c.nextValue("tiny");
            }
            assertArrayEquals(new long[] {1, 2, 3, 4, 5}, got, "--max 5: values 1 ..= 5");
            ServerException e = assertThrows(ServerException.class, () -> c.nextValue("tiny"));
            assertEquals(Status.SEQUENCE_USED_UP, e.status());
            assertEquals(Status.SEQUENCE_USED_UP,
                    assertThrows(ServerException.class, () -> c.nextValues("tiny", 2)).status());
            assertEquals(0, c.stats().nodeFailures(), "no node can help: not a node failure");
            assertTrue(c.nextValue("orders") >= 1);
        }
    }

    @Test
    void prefetchOnADenseSequenceSendsAboutOneRequestPerKCalls() {
        int k = 50;
        try (IdgenClient c = IdgenClient.builder().nodes(node.addr).sequencePrefetch(k).build()) {
            long prev = 0;
            for (int i = 0; i < 1000; i++) {
                long v = c.nextValue("orders.prefetch");
                assertTrue(v > prev, "increasing at call " + i);
                prev = v;
            }
            // The first call asks for exactly 1 (and learns "dense"), then one request per 50 calls.
            assertEquals(1 + (999 + k - 1) / k, c.stats().valueRequests(), c.stats().toString());
            assertEquals(1 + 20 * k, c.stats().values());
        }
    }

    @Test
    void prefetchUnderConcurrentCallersNeverHandsOutAValueTwice() throws Exception {
        int k = 100;
        try (IdgenClient c = IdgenClient.builder().nodes(node.addr).sequencePrefetch(k).build()) {
            ExecutorService pool = Executors.newFixedThreadPool(4);
            try {
                List<Future<List<Long>>> rs = new ArrayList<>();
                for (int t = 0; t < 4; t++) {
                    rs.add(pool.submit(() -> {
                        List<Long> got = new ArrayList<>();
                        for (int i = 0; i < 300; i++) {
                            for (long v : c.nextValues("orders.threads", 1 + i % 3)) {
                                got.add(v);
                            }
                        }
                        return got;
                    }));
                }
                Set<Long> all = new HashSet<>();
                for (Future<List<Long>> r : rs) {
                    List<Long> got = r.get(120, TimeUnit.SECONDS);
                    for (int i = 0; i < got.size(); i++) {
                        assertTrue(all.add(got.get(i)), "value " + got.get(i) + " twice");
                        if (i > 0) {
                            assertTrue(got.get(i - 1) < got.get(i), "a thread's values increase");
                        }
                    }
                }
                assertEquals(4 * 600, all.size());
                long requests = c.stats().valueRequests();
                assertTrue(requests <= all.size() / k + 2 + 4 && requests >= all.size() / k,
                        requests + " requests for " + all.size() + " values");
            } finally {
                pool.shutdownNow();
            }
        }
    }

    @Test
    void prefetchSendsEveryCallOfAStrictSequence() {
        try (IdgenClient c = IdgenClient.builder().nodes(node.addr).sequencePrefetch(50).build()) {
            long prev = 0;
            for (int i = 0; i < 100; i++) {
                long v = c.nextValue("ledger.prefetch");
                assertTrue(v > prev, "strict values follow the calls' real-time order");
                prev = v;
            }
            assertEquals(100, c.stats().valueRequests(), "one request per call: strict values are never kept");
            assertEquals(100, c.stats().values());
            assertEquals(SequenceMode.STRICT, c.sequencePrefetch().mode("ledger.prefetch"));
        }
    }
}
