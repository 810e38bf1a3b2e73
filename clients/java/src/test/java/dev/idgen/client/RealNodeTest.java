package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
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

/** Against a real node: handshake, version 3, batches, pipelining, deadlines, prefetch under concurrency. */
class RealNodeTest {
    static Support.Node node;

    @BeforeAll
    static void start() throws Exception {
        node = Support.Node.memory("--max-batch", "1000", "--workers-per-shard", "4");
    }

    @AfterAll
    static void stop() {
        if (node != null) {
            node.close();
        }
    }

    static void assertIncreasing(long[] ids) {
        for (int i = 1; i < ids.length; i++) {
            assertTrue(ids[i - 1] < ids[i], "not increasing at " + i);
        }
    }

    @Test
    void handshakeNegotiatesVersion5AndTheLayoutDecodesIds() {
        try (IdgenClient c = IdgenClient.create(node.addr)) {
            long id = c.nextId();
            NodeInfo info = c.nodes().get(0);
            assertEquals(5, info.hello().version());
            assertEquals(1000, info.hello().maxBatch());
            Layout.Parts p = c.decode(id);
            assertTrue(Math.abs(p.unixMs() - System.currentTimeMillis()) < 60_000, "timestamp " + p);
            long first = info.hello().workerFirst();
            assertTrue(p.worker() >= first && p.worker() < first + info.hello().workerCount(), "worker in the announced range");
            assertTrue(c.ping().compareTo(Duration.ofSeconds(1)) < 0);
        }
    }

    @Test
    void batchesAboveMaxBatchAreSplitAndRejoinedOverRangesAndIdLists() {
        for (boolean ranges : new boolean[] {true, false}) {
            try (IdgenClient c = IdgenClient.builder().nodes(node.addr).useRanges(ranges).build()) {
                long[] ids = c.nextIds(4500);
                assertEquals(4500, ids.length);
                assertIncreasing(ids);
                long[] more = c.nextIds(1);
                assertTrue(more[0] > ids[ids.length - 1], "one connection's IDs increase");
                assertEquals(5, c.stats().requests() - 1, "4500 IDs in 5 requests of at most 1000");
            }
        }
    }

    @Test
    void countZeroIsRefusedLocallyInEveryCallNothingSent() {
        try (IdgenClient c = IdgenClient.create(node.addr)) {
            List<org.junit.jupiter.api.function.Executable> calls = List.of(
                    () -> c.nextIds(0), () -> c.nextIds(0, Duration.ofSeconds(1)), () -> c.nextIdsAsync(0),
                    () -> c.nextIds(0, IdOptions.NONE), () -> c.nextIdsAsync(0, IdOptions.NONE, Duration.ofSeconds(1)),
                    () -> c.nextMaskedIds(0, IdOptions.NONE), () -> c.nextUuids(0), () -> c.nextUuidsAsync(0),
                    () -> c.nextValues("orders", 0), () -> c.nextValuesAsync("orders", 0),
                    () -> c.nextIds(-1), () -> c.nextUuids(-1), () -> c.nextValues("orders", -1));
            for (org.junit.jupiter.api.function.Executable call : calls) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, call);
                assertTrue(e.getMessage().contains("1 .."), e.getMessage());
            }
            assertEquals(0, c.stats().connects(), "nothing connected");
            assertEquals(0, c.stats().requests(), "nothing sent");
            assertEquals(3, c.nextIds(3).length, "the client stays usable");
        }
    }

    @Test
    void manyRequestsInFlightOnOneConnectionAreAllAnswered() throws Exception {
        try (IdgenClient c = IdgenClient.create(node.addr)) {
            long before = c.nextId(); // connected: later calls are sent in the order they are made
            List<CompletableFuture<long[]>> fs = new ArrayList<>();
            for (int i = 0; i < 2000; i++) {
                fs.add(c.nextIdsAsync(1 + i % 7));
            }
            Set<Long> all = new HashSet<>();
            long prevLast = before;
            for (CompletableFuture<long[]> f : fs) {
                long[] ids = f.get(10, TimeUnit.SECONDS);
                assertIncreasing(ids);
                assertTrue(ids[0] > prevLast, "answers in request order");
                prevLast = ids[ids.length - 1];
                for (long id : ids) {
                    assertTrue(all.add(id));
                }
            }
            assertEquals(1, c.stats().connects(), "one connection for all of them");
        }
    }

    @Test
    void aDeadlineTooShortForTheCallFailsIt() throws Exception {
        try (Support.Fake silent = new Support.Fake(Support.Mode.SILENT, 0, 0,
                Support.helloOk(2, 1704067200000L, 0, 65536, 0, 1), null);
                IdgenClient c = IdgenClient.builder().nodes(silent.addr).requestTimeout(Duration.ofSeconds(5)).build()) {
            long t0 = System.nanoTime();
            assertThrows(DeadlineExceededException.class, () -> c.nextIds(5, Duration.ofMillis(200)));
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= 150 && ms < 3000, "took " + ms + " ms");
            assertEquals(0, c.stats().nodeFailures(), "the caller's deadline is not the node's fault");
            // Async, with its own deadline.
            CompletableFuture<long[]> f = c.nextIdsAsync(1, Duration.ofMillis(100));
            Throwable e = assertThrows(Exception.class, () -> f.get(5, TimeUnit.SECONDS));
            assertTrue(IdgenClient.unwrap(e) instanceof DeadlineExceededException, e.toString());
        }
    }

    @Test
    void concurrentCallersAndPrefetchNeverSeeAnIdTwice() throws Exception {
        try (IdgenClient c = IdgenClient.builder().nodes(node.addr).prefetch(500, 100).build()) {
            ExecutorService pool = Executors.newFixedThreadPool(16);
            try {
                List<Future<List<Long>>> results = new ArrayList<>();
                for (int t = 0; t < 16; t++) {
                    final int kind = t;
                    results.add(pool.submit(() -> {
                        List<Long> got = new ArrayList<>();
                        for (int i = 0; i < 1500; i++) {
                            if (kind % 4 == 0 && i % 50 == 0) {
                                for (long id : c.nextIds(37)) {
                                    got.add(id);
                                }
                            } else if (kind % 4 == 1) {
                                got.add(c.nextIdAsync().get(5, TimeUnit.SECONDS));
                            } else {
                                got.add(c.nextId());
                            }
                        }
                        return got;
                    }));
                }
                Set<Long> all = new HashSet<>();
                int n = 0;
                for (Future<List<Long>> f : results) {
                    for (long id : f.get(120, TimeUnit.SECONDS)) {
                        n++;
                        assertTrue(all.add(id), "ID " + id + " handed out twice");
                    }
                }
                assertEquals(n, all.size());
                assertTrue(c.stats().prefetchServed() >= 16 * 1400, "served from the pool: " + c.stats());
                assertTrue(c.stats().prefetchRefills() >= 2);
            } finally {
                pool.shutdownNow();
            }
        }
    }

    @Test
    void closedClientRefusesCalls() {
        IdgenClient c = IdgenClient.create(node.addr);
        c.nextId();
        c.close();
        assertThrows(ClientClosedException.class, c::nextId);
        assertThrows(IllegalArgumentException.class, () -> IdgenClient.builder().build());
        assertThrows(IllegalArgumentException.class, () -> IdgenClient.create("no-port"));
        assertThrows(IllegalArgumentException.class, () -> IdgenClient.create("a:1", "a:1"));
        assertNotEquals("", c.toString());
    }
}
