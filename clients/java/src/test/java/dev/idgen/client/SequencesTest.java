package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Named sequences against fake nodes (clients/vectors/SEQUENCES.md): the calls, the checks
 * before sending, how each answer maps, a node without version 3, and prefetch (dense only,
 * learnt from the first answer, cleared by UNKNOWN_SEQUENCE, at most 1024 names, thread-safe).
 */
class SequencesTest {
    static final long EPOCH = 1704067200000L;

    static byte[] v3(long maxBatch, long workerFirst) {
        return Support.helloOk(3, EPOCH, 0, maxBatch, workerFirst, 1);
    }

    static Support.Fake serving(long maxBatch) throws Exception {
        return new Support.Fake(Support.Mode.SERVE, 0, 0, v3(maxBatch, 0), null);
    }

    static long[] range(long first, int n) {
        long[] out = new long[n];
        for (int i = 0; i < n; i++) {
            out[i] = first + i;
        }
        return out;
    }

    static List<Long> repeat(long v, int times) {
        return new ArrayList<>(Collections.nCopies(times, v));
    }

    static NodeInfo info(IdgenClient c, String addr) {
        return c.nodes().stream().filter(n -> n.address().equals(addr)).findFirst().orElseThrow();
    }

    @Test
    void eachCallIsOneGetValuesOfItsCount() throws Exception {
        try (Support.Fake f = serving(65536).sequence("orders", SequenceMode.DENSE, 42, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.create(f.addr)) {
            assertEquals(42, c.nextValue("orders"));
            assertArrayEquals(new long[] {43, 44, 45}, c.nextValues("orders", 3));
            assertEquals(46, c.nextValue("orders", Duration.ofSeconds(2)));
            assertEquals(47, c.nextValueAsync("orders").get(5, TimeUnit.SECONDS));
            assertArrayEquals(range(48, 10), c.nextValuesAsync("orders", 10, Duration.ofSeconds(2)).get(5, TimeUnit.SECONDS));
            assertArrayEquals(range(58, 65536), c.nextValues("orders", 65536), "n = max_batch");
            assertEquals(List.of(1L, 3L, 1L, 1L, 10L, 65536L), f.counts());
            assertEquals(3, c.nodes().get(0).hello().version());
            ClientStats s = c.stats();
            assertEquals(6, s.valueRequests());
            assertEquals(16 + 65536, s.values());
            assertEquals(0, s.requests(), "no GET_IDS");
        }
    }

    @Test
    void badNamesAndCountsAreRefusedBeforeAnythingIsSent() throws Exception {
        try (Support.Fake f = serving(100).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.create(f.addr)) {
            for (String bad : new String[] {"", "Orders", ".orders", "-orders", "_x", "a b", "a/b", "caf\u00e9",
                    "x".repeat(65), null}) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.nextValue(bad), bad);
                assertTrue(e.getMessage().contains("sequence name"), e.getMessage());
                assertThrows(IllegalArgumentException.class, () -> c.nextValuesAsync(bad, 1), bad);
            }
            for (int n : new int[] {0, -1, (1 << 20) + 1, Integer.MIN_VALUE}) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.nextValues("orders", n));
                assertTrue(e.getMessage().startsWith("n must be in 1 .. 1048576"), e.getMessage());
            }
            assertThrows(IllegalArgumentException.class, () -> c.nextValue("orders", Duration.ZERO));
            assertThrows(IllegalArgumentException.class, () -> c.nextValue("orders", null));
            assertEquals(0, f.connections.get(), "nothing sent, not even a connection");

            // Above the node's max_batch: known once connected; refused there, nothing sent.
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.nextValues("orders", 101));
            assertTrue(e.getMessage().contains("max_batch 100"), e.getMessage());
            assertEquals(0, f.valueRequests.get());
            assertEquals(0, c.stats().nodeFailures(), "the caller's mistake is not the node's failure");
            assertArrayEquals(range(1, 100), c.nextValues("orders", 100));
            assertEquals(List.of(100L), f.counts());
        }
    }

    @Test
    void aNameTooLongForTheNodesFrameLimitIsRefusedBeforeSending() throws Exception {
        // A version 3 node configured with max_request_frame 64: GET_VALUES of a 60-byte name is 65.
        try (Support.Fake f = new Support.Fake(Support.Mode.SERVE, 0, 0,
                Support.helloOk(3, EPOCH, 0, 65536, 0, 1, 64), null);
                IdgenClient c = IdgenClient.create(f.addr)) {
            f.anyName = true;
            String name = "n".repeat(60);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.nextValue(name));
            assertTrue(e.getMessage().contains("max_request_frame 64"), e.getMessage());
            assertEquals(0, f.valueRequests.get());
            assertEquals(1, c.nextValue("n".repeat(59)), "65 bytes: 64 fit");
        }
    }

    @Test
    void aNodeWithoutVersion3IsRefusedWithoutSendingOrTryingAnother() throws Exception {
        for (int version : new int[] {1, 2}) {
            try (Support.Fake old = new Support.Fake(Support.Mode.SERVE, 0, 0,
                    Support.helloOk(version, EPOCH, 0, 65536, 0, 1), null);
                    Support.Fake current = serving(65536).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE);
                    IdgenClient c = IdgenClient.builder().nodes(old.addr, current.addr).sequencePrefetch(10).build()) {
                SequencesUnsupportedException e = assertThrows(SequencesUnsupportedException.class,
                        () -> c.nextValue("orders"));
                assertEquals(version, e.version());
                assertEquals(old.addr, e.node());
                assertTrue(e.getMessage().contains("speaks protocol version " + version)
                        && e.getMessage().contains("named sequences need version 3"), e.getMessage());
                assertEquals(1, old.connections.get(), "the node was connected to learn its version");
                assertEquals(0, old.requests.get(), "nothing sent");
                assertEquals(0, current.connections.get(), "no other node tried");
                assertEquals(0, c.stats().nodeFailures());
                assertEquals(0, c.stats().valueRequests());
                // Asynchronously too, and the node still serves IDs.
                ExecutionException ee = assertThrows(ExecutionException.class,
                        () -> c.nextValuesAsync("orders", 2).get(5, TimeUnit.SECONDS));
                assertInstanceOf(SequencesUnsupportedException.class, ee.getCause());
                assertEquals(3, c.nextIds(3).length);
                assertEquals(0, current.requests.get());
            }
        }
    }

    @Test
    void statusesEveryNodeWouldRepeatFailAtOnceWithTheStatus() throws Exception {
        for (int status : new int[] {Status.UNKNOWN_SEQUENCE, Status.INVALID_SEQUENCE_NAME, Status.SEQUENCE_USED_UP,
                Status.INVALID_COUNT, Status.BATCH_TOO_LARGE}) {
            try (Support.Fake a = new Support.Fake(Support.Mode.UNAVAILABLE, status, 0, v3(65536, 0), null);
                    Support.Fake b = serving(65536);
                    IdgenClient c = IdgenClient.create(a.addr, b.addr)) {
                b.anyName = true;
                ServerException e = assertThrows(ServerException.class, () -> c.nextValues("orders", 2));
                assertEquals(status, e.status());
                assertEquals(Status.name(status), e.statusName());
                assertFalse(e.retryElsewhere());
                assertEquals(1, a.valueRequests.get(), "asked once: no retry");
                assertEquals(0, b.connections.get(), "no failover for " + status);
                assertEquals(0, c.stats().nodeFailures());
                // The connection stays usable.
                assertThrows(ServerException.class, () -> c.nextValue("orders"));
                assertEquals(1, a.connections.get());
            }
        }
    }

    @Test
    void unavailableAndBusyAnswersAreRetriedOnAnotherNode() throws Exception {
        for (int status : new int[] {Status.SEQUENCE_UNAVAILABLE, Status.BUSY, Status.UNAVAILABLE_LEASE,
                Status.SHUTTING_DOWN}) {
            try (Support.Fake a = new Support.Fake(Support.Mode.UNAVAILABLE, status, 0, v3(65536, 0), null);
                    Support.Fake b = serving(65536).sequence("orders", SequenceMode.DENSE, 7, Long.MAX_VALUE);
                    IdgenClient c = IdgenClient.builder().nodes(a.addr, b.addr)
                            .backoff(Duration.ofSeconds(5), Duration.ofSeconds(10)).build()) {
                assertArrayEquals(new long[] {7, 8}, c.nextValues("orders", 2), "status " + status);
                assertEquals(1, a.valueRequests.get());
                assertEquals(List.of(2L), b.counts(), "asked again, for the same count");
                assertEquals(1, c.stats().failovers());
                assertEquals(status, assertInstanceOf(ServerException.class, info(c, a.addr).lastError()).status());
                assertEquals(!Status.closesConnection(status), info(c, a.addr).connected());
            }
        }
        // One node: its answer is the call's error.
        try (Support.Fake a = new Support.Fake(Support.Mode.UNAVAILABLE, Status.SEQUENCE_UNAVAILABLE, 0, v3(65536, 0), null);
                IdgenClient c = IdgenClient.create(a.addr)) {
            ServerException e = assertThrows(ServerException.class, () -> c.nextValue("orders"));
            assertEquals(Status.SEQUENCE_UNAVAILABLE, e.status());
            assertTrue(e.retryElsewhere());
            assertEquals(1, a.valueRequests.get());
        }
    }

    @Test
    void aMalformedValuesAnswerDropsTheConnectionAndFailsOver() throws Exception {
        try (Support.Fake bad = new Support.Fake(Support.Mode.BAD_VALUES, 0, 0, v3(65536, 0), null);
                Support.Fake good = serving(65536).sequence("orders", SequenceMode.STRICT, 5, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.create(bad.addr, good.addr);
                IdgenClient alone = IdgenClient.create(bad.addr)) {
            assertArrayEquals(new long[] {5, 6, 7}, c.nextValues("orders", 3));
            ProtocolException pe = assertInstanceOf(ProtocolException.class, info(c, bad.addr).lastError());
            assertTrue(pe.getMessage().contains("asked for 3 values, got VALUES of 4"), pe.getMessage());
            assertFalse(info(c, bad.addr).connected());
            assertThrows(ProtocolException.class, () -> alone.nextValue("orders"));
        }
    }

    @Test
    void aSilentNodeFailsTheCallByItsDeadline() throws Exception {
        try (Support.Fake silent = new Support.Fake(Support.Mode.SILENT, 0, 0, v3(65536, 0), null);
                IdgenClient c = IdgenClient.builder().nodes(silent.addr).requestTimeout(Duration.ofSeconds(5)).build()) {
            long t0 = System.nanoTime();
            assertThrows(DeadlineExceededException.class, () -> c.nextValue("orders", Duration.ofMillis(200)));
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= 150 && ms < 3000, "took " + ms + " ms");
            assertEquals(0, c.stats().nodeFailures());
        }
    }

    // ---- Prefetch ----

    @Test
    void prefetchOnADenseSequenceSendsAboutOneRequestPerKCalls() throws Exception {
        try (Support.Fake f = serving(65536).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(100).build()) {
            long prev = 0;
            for (int i = 0; i < 1000; i++) {
                long v = c.nextValue("orders");
                assertEquals(prev + 1, v, "one client's calls see the values in order");
                prev = v;
            }
            // The first call asks for exactly 1 and learns "dense"; then one fetch of 100 per 100 calls.
            List<Long> want = new ArrayList<>(List.of(1L));
            want.addAll(repeat(100, 10));
            assertEquals(want, f.counts());
            assertEquals(11, c.stats().valueRequests());
            SequencePrefetch p = c.sequencePrefetch();
            assertEquals(SequenceMode.DENSE, p.mode("orders"));
            assertEquals(1, p.buffered("orders"), "1001 fetched, 1000 handed out");
        }
    }

    @Test
    void prefetchNeverKeepsStrictValues() throws Exception {
        try (Support.Fake f = serving(65536).sequence("ledger", SequenceMode.STRICT, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(100).build()) {
            List<Long> want = new ArrayList<>();
            long prev = 0;
            for (int i = 0; i < 200; i++) {
                int n = i % 3 == 0 ? 3 : 1;
                long[] vs = c.nextValues("ledger", n);
                assertEquals(n, vs.length);
                assertEquals(prev + 1, vs[0]);
                prev = vs[n - 1];
                want.add((long) n);
            }
            assertEquals(want, f.counts(), "every strict call asks for exactly its n");
            assertEquals(200, c.stats().valueRequests());
            assertEquals(SequenceMode.STRICT, c.sequencePrefetch().mode("ledger"));
            assertEquals(0, c.sequencePrefetch().buffered("ledger"));
        }
    }

    @Test
    void aCallTheBufferCannotAnswerTakesWhatItHoldsFirst() throws Exception {
        try (Support.Fake f = serving(65536).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(10).build()) {
            assertEquals(1, c.nextValue("orders")); // learns dense
            assertEquals(2, c.nextValue("orders")); // fetch of 10: 2..11, keeps 3..11
            assertEquals(9, c.sequencePrefetch().buffered("orders"));
            // 12 > 9 held: asks max(10, 12) = 12 (12..23), answers the 12 smallest, keeps the rest.
            assertArrayEquals(range(3, 12), c.nextValues("orders", 12));
            assertEquals(9, c.sequencePrefetch().buffered("orders"));
            assertArrayEquals(range(15, 9), c.nextValues("orders", 9), "from the buffer");
            assertEquals(List.of(1L, 10L, 12L), f.counts());
        }
    }

    @Test
    void prefetchAsksNoMoreThanTheNodesMaxBatch() throws Exception {
        try (Support.Fake f = serving(50).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(1000).build()) {
            for (int i = 0; i < 120; i++) {
                assertEquals(i + 1, c.nextValue("orders"));
            }
            List<Long> want = new ArrayList<>(List.of(1L));
            want.addAll(repeat(50, 3));
            assertEquals(want, f.counts());
        }
    }

    @Test
    void unknownSequenceEmptiesTheBufferAndForgetsTheMode() throws Exception {
        try (Support.Fake f = serving(65536).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(10).build()) {
            SequencePrefetch p = c.sequencePrefetch();
            c.nextValue("orders"); // 1, learns dense
            c.nextValue("orders"); // 2, keeps 3..11
            assertArrayEquals(range(3, 5), c.nextValues("orders", 5)); // keeps 8..11
            assertEquals(4, p.buffered("orders"));
            f.sequences.get("orders").dropped = true; // an operator drops it
            ServerException e = assertThrows(ServerException.class, () -> c.nextValues("orders", 5));
            assertEquals(Status.UNKNOWN_SEQUENCE, e.status());
            assertEquals(0, p.buffered("orders"), "8..11 are gone");
            assertNull(p.mode("orders"), "the mode is forgotten");
            // Created again, strict this time: the first call asks for exactly its n again.
            f.sequence("orders", SequenceMode.STRICT, 1000, Long.MAX_VALUE);
            assertEquals(1000, c.nextValue("orders"));
            assertEquals(SequenceMode.STRICT, p.mode("orders"));
            assertEquals(1001, c.nextValue("orders"));
            assertEquals(List.of(1L, 10L, 10L, 1L, 1L), f.counts());
        }
    }

    @Test
    void unknownSequenceOnAFirstCallAlsoFailsWithTheStatus() throws Exception {
        try (Support.Fake f = serving(65536);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(10).build()) {
            assertEquals(Status.UNKNOWN_SEQUENCE,
                    assertThrows(ServerException.class, () -> c.nextValue("nope")).status());
            assertNull(c.sequencePrefetch().mode("nope"));
        }
    }

    @Test
    void aPrefetchAnsweredUsedUpAsksForExactlyWhatTheCallNeeds() throws Exception {
        try (Support.Fake f = serving(65536).sequence("tiny", SequenceMode.DENSE, 1, 5);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(10).build()) {
            for (int i = 1; i <= 5; i++) {
                assertEquals(i, c.nextValue("tiny"));
            }
            ServerException e = assertThrows(ServerException.class, () -> c.nextValue("tiny"));
            assertEquals(Status.SEQUENCE_USED_UP, e.status());
            // 1 (learn), 10 refused (4 left), then exactly 1 per call, the last refused.
            List<Long> want = new ArrayList<>(List.of(1L, 10L));
            want.addAll(repeat(1, 5));
            assertEquals(want, f.counts());
        }
    }

    @Test
    void callsMadeWhileTheFirstLearnsTheModeWaitForItsAnswer() throws Exception {
        try (Support.Fake f = serving(65536).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(10).build()) {
            c.nextIds(1); // connected, so the calls below are sent in the order they are made
            f.delayMs = 200;
            List<CompletableFuture<Long>> fs = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                fs.add(c.nextValueAsync("orders"));
            }
            Set<Long> got = new HashSet<>();
            for (CompletableFuture<Long> x : fs) {
                got.add(x.get(10, TimeUnit.SECONDS));
            }
            assertEquals(Set.of(1L, 2L, 3L, 4L, 5L), got);
            // One request of exactly 1 learns "dense"; the four that waited share one fetch of K.
            assertEquals(List.of(1L, 10L), f.counts());
        }
        try (Support.Fake f = serving(65536).sequence("ledger", SequenceMode.STRICT, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(10).build()) {
            c.nextIds(1);
            f.delayMs = 100;
            List<CompletableFuture<long[]>> fs = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                fs.add(c.nextValuesAsync("ledger", 2));
            }
            for (CompletableFuture<long[]> x : fs) {
                assertEquals(2, x.get(10, TimeUnit.SECONDS).length);
            }
            // Strict: once learnt, each waiting call asks for exactly its own n.
            assertEquals(List.of(2L, 2L, 2L, 2L), f.counts());
        }
    }

    @Test
    void concurrentCallersWithPrefetchGetEachValueOnceAndInOrder() throws Exception {
        int threads = 8;
        int calls = 400;
        int k = 64;
        try (Support.Fake f = serving(65536).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(k).build()) {
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                List<Future<List<Long>>> results = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    final int kind = t;
                    results.add(pool.submit(() -> {
                        List<Long> got = new ArrayList<>();
                        for (int i = 0; i < calls; i++) {
                            long[] vs = switch (kind % 3) {
                                case 0 -> c.nextValues("orders", 1 + i % 5);
                                case 1 -> new long[] {c.nextValueAsync("orders").get(10, TimeUnit.SECONDS)};
                                default -> new long[] {c.nextValue("orders")};
                            };
                            for (long v : vs) {
                                got.add(v);
                            }
                        }
                        return got;
                    }));
                }
                Set<Long> all = new HashSet<>();
                for (Future<List<Long>> r : results) {
                    List<Long> got = r.get(120, TimeUnit.SECONDS);
                    for (int i = 0; i < got.size(); i++) {
                        assertTrue(all.add(got.get(i)), "value " + got.get(i) + " handed out twice");
                        if (i > 0) {
                            assertTrue(got.get(i - 1) < got.get(i), "a thread's values increase");
                        }
                    }
                }
                long requests = c.stats().valueRequests();
                long total = all.size();
                assertTrue(c.stats().values() >= total);
                // One fetch of K per K values, plus the first calls that learnt the mode.
                assertTrue(requests <= total / k + 2 + threads, requests + " requests for " + total + " values");
                assertTrue(requests >= total / k, requests + " requests for " + total + " values");
            } finally {
                pool.shutdownNow();
            }
        }
    }

    @Test
    void prefetchHoldsAtMost1024NamesForgettingTheLeastRecentlyUsed() throws Exception {
        try (Support.Fake f = serving(65536);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(4).build()) {
            f.anyName = true;
            SequencePrefetch p = c.sequencePrefetch();
            for (int i = 0; i < 1030; i++) {
                c.nextValue("s" + i); // learns dense
                c.nextValue("s" + i); // keeps 3 values
            }
            assertEquals(SequencePrefetch.MAX_NAMES, p.names());
            for (int i = 0; i < 6; i++) {
                assertNull(p.mode("s" + i), "s" + i + " forgotten");
            }
            assertEquals(SequenceMode.DENSE, p.mode("s6"));
            assertEquals(3, p.buffered("s1029"));
            int before = f.valueRequests.get();
            assertEquals(6, c.nextValue("s0"), "a forgotten name asks again (its 3 kept values are a gap)");
            assertEquals(1L, f.counts().get(before));
            assertEquals(SequencePrefetch.MAX_NAMES, p.names());
        }
    }

    @Test
    void aQueuedCallWaitsItsOwnDeadlineNotTheFetchersOne() throws Exception {
        try (Support.Fake f = serving(65536).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE);
                IdgenClient c = IdgenClient.builder().nodes(f.addr).requestTimeout(Duration.ofSeconds(5))
                        .sequencePrefetch(10).build()) {
            assertEquals(1, c.nextValue("orders")); // learns dense, buffer empty
            f.delayMs = 500;
            CompletableFuture<Long> quick = c.nextValueAsync("orders", Duration.ofMillis(200)); // fetches
            CompletableFuture<Long> patient = c.nextValueAsync("orders", Duration.ofSeconds(5)); // queued behind it
            ExecutionException e = assertThrows(ExecutionException.class, () -> quick.get(5, TimeUnit.SECONDS));
            assertInstanceOf(DeadlineExceededException.class, e.getCause());
            long v = patient.get(10, TimeUnit.SECONDS);
            assertTrue(v > 1, "served by a fetch of its own after the first one timed out: " + v);
            assertEquals(List.of(1L, 10L, 10L), f.counts());
        }
    }

    @Test
    void closingTheClientFailsQueuedCalls() throws Exception {
        try (Support.Fake f = serving(65536).sequence("orders", SequenceMode.DENSE, 1, Long.MAX_VALUE)) {
            IdgenClient c = IdgenClient.builder().nodes(f.addr).sequencePrefetch(10).build();
            c.nextValue("orders");
            f.delayMs = 2000;
            CompletableFuture<long[]> waiting = c.nextValuesAsync("orders", 2, Duration.ofSeconds(10));
            Thread.sleep(100);
            c.close();
            ExecutionException e = assertThrows(ExecutionException.class, () -> waiting.get(5, TimeUnit.SECONDS));
            assertInstanceOf(ClientClosedException.class, e.getCause());
            assertThrows(ClientClosedException.class, () -> c.nextValue("orders"));
        }
    }

    @Test
    void sequencePrefetchIsBounded() {
        assertThrows(IllegalArgumentException.class, () -> IdgenClient.builder().sequencePrefetch(-1));
        assertThrows(IllegalArgumentException.class, () -> IdgenClient.builder().sequencePrefetch((1 << 20) + 1));
        try (IdgenClient c = IdgenClient.builder().nodes("127.0.0.1:1").build()) {
            assertNull(c.sequencePrefetch(), "off by default");
        }
    }
}
