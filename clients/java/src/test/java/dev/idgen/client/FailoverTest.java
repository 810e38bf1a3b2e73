package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * Several nodes: what the shared scenarios (ScenariosTest, clients/vectors/scenarios.json) cannot
 * say: real nodes killed under concurrent callers, backoff timing, each node's last error and
 * the stats, RANGE_CHANGED in split batches and under concurrency, layouts, version 1 nodes.
 */
class FailoverTest {
    static final long EPOCH = 1704067200000L;

    static byte[] hello(long maxBatch, long workerFirst) {
        return Support.helloOk(2, EPOCH, 0, maxBatch, workerFirst, 1);
    }

    static NodeInfo info(IdgenClient c, String addr) {
        return c.nodes().stream().filter(n -> n.address().equals(addr)).findFirst().orElseThrow();
    }

    @Test
    void aNodeKilledUnderConcurrentCallersFailsOverAndNoIdRepeats() throws Exception {
        // Two real nodes with disjoint worker IDs (regions 0 and 1 of a 1-bit region field).
        try (Support.Node doomed = Support.Node.memory("--region-bits", "1", "--region", "0");
                Support.Node survivor = Support.Node.memory("--region-bits", "1", "--region", "1");
                IdgenClient c = IdgenClient.builder().nodes(doomed.addr, survivor.addr)
                        .requestTimeout(Duration.ofSeconds(2)).backoff(Duration.ofMillis(300), Duration.ofSeconds(5)).build()) {
            AtomicBoolean killed = new AtomicBoolean();
            AtomicLong received = new AtomicLong();
            ExecutorService pool = Executors.newFixedThreadPool(4);
            List<Future<List<long[]>>> results = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                results.add(pool.submit(() -> {
                    List<long[]> got = new ArrayList<>();
                    int after = 0;
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                    while (after < 40 && System.nanoTime() < deadline) {
                        boolean wasKilled = killed.get();
                        long[] ids = c.nextIds(25);
                        assertEquals(25, ids.length);
                        got.add(wasKilled ? prepend(1, ids) : prepend(0, ids));
                        received.addAndGet(25);
                        if (wasKilled) {
                            after++;
                        }
                    }
                    return got;
                }));
            }
            for (int i = 0; i < 1000 && received.get() < 5000; i++) {
                Thread.sleep(10);
            }
            doomed.kill();
            killed.set(true);
            Set<Long> all = new HashSet<>();
            Set<Long> regions = new HashSet<>();
            for (Future<List<long[]>> f : results) {
                List<long[]> got = f.get(120, TimeUnit.SECONDS);
                int tail = 0;
                for (long[] tagged : got) {
                    for (int i = 1; i < tagged.length; i++) {
                        assertTrue(all.add(tagged[i]), "duplicate ID across failover");
                        long region = c.decode(tagged[i]).region();
                        regions.add(region);
                        if (tagged[0] == 1) {
                            assertEquals(1, region, "calls made after the kill are served by the survivor");
                        }
                    }
                    tail += (int) tagged[0];
                }
                assertEquals(40, tail);
            }
            pool.shutdownNow();
            assertEquals(Set.of(0L, 1L), regions, "IDs from the first node, then the survivor");
            assertTrue(c.stats().failovers() >= 1 && c.stats().nodeFailures() >= 1, c.stats().toString());
            assertInstanceOf(UnavailableException.class, info(c, doomed.addr).lastError());
        }
    }

    static long[] prepend(long tag, long[] ids) {
        long[] out = new long[ids.length + 1];
        out[0] = tag;
        System.arraycopy(ids, 0, out, 1, ids.length);
        return out;
    }

    @Test
    void unavailableAnswersAndUnreachableNodesAreSkippedAndBackedOff() throws Exception {
        int deadPort = Support.freePort();
        try (Support.Fake says300 = new Support.Fake(Support.Mode.UNAVAILABLE, 300, 0, hello(65536, 0), null);
                Support.Fake serving = new Support.Fake(Support.Mode.SERVE, 0, 0, hello(65536, 1), null);
                IdgenClient c = IdgenClient.builder().nodes("127.0.0.1:" + deadPort, says300.addr, serving.addr)
                        .backoff(Duration.ofSeconds(5), Duration.ofSeconds(10)).build()) {
            assertEquals(10, c.nextIds(10).length);
            NodeInfo dead = info(c, "127.0.0.1:" + deadPort);
            NodeInfo fake = info(c, says300.addr);
            assertTrue(dead.downFor().toMillis() > 1000 && fake.downFor().toMillis() > 1000);
            assertInstanceOf(UnavailableException.class, dead.lastError());
            ServerException e = assertInstanceOf(ServerException.class, fake.lastError());
            assertEquals(300, e.status());
            assertTrue(fake.connected(), "a 300 keeps the connection");
            assertEquals(2, c.stats().failovers());
            // Later calls go straight to the node that answered.
            int before = says300.requests.get();
            c.nextIds(10);
            assertEquals(before, says300.requests.get());
            assertEquals(2, c.stats().failovers());
        }
    }

    @Test
    void everyNodeDownRaisesNoNodeAvailableNamingEachError() throws Exception {
        try (Support.Fake a = new Support.Fake(Support.Mode.UNAVAILABLE, 301, 0, hello(65536, 0), null);
                Support.Fake b = new Support.Fake(Support.Mode.GARBAGE, 0, 0, hello(65536, 1), null);
                IdgenClient c = IdgenClient.builder().nodes(a.addr, b.addr).build()) {
            NoNodeAvailableException e = assertThrows(NoNodeAvailableException.class, () -> c.nextIds(1));
            assertEquals(301, assertInstanceOf(ServerException.class, e.errors().get(a.addr)).status());
            assertEquals(Status.BAD_FRAME, assertInstanceOf(ProtocolException.class, e.errors().get(b.addr)).status());
            assertTrue(e.getMessage().contains(a.addr) && e.getMessage().contains(b.addr));
        }
    }

    @Test
    void backoffDoublesAndIsCapped() throws Exception {
        int deadPort = Support.freePort();
        try (IdgenClient c = IdgenClient.builder().nodes("127.0.0.1:" + deadPort)
                .backoff(Duration.ofMillis(100), Duration.ofMillis(350)).build()) {
            long[] expected = {100, 200, 350, 350};
            for (long want : expected) {
                assertThrows(UnavailableException.class, () -> c.nextIds(1));
                NodeInfo n = c.nodes().get(0);
                assertTrue(n.downFor().toMillis() <= want && n.downFor().toMillis() > want - 80, n.downFor() + " vs " + want);
                Thread.sleep(want + 20);
            }
            assertEquals(4, c.nodes().get(0).failures());
        }
    }

    @Test
    void rangeChangedInASplitBatchNeverHandsOutTheAnsweredPart() throws Exception {
        try (Support.Fake f = new Support.Fake(Support.Mode.RANGE_CHANGED, 0, 1, hello(10, 5), hello(10, 9));
                IdgenClient c = IdgenClient.create(f.addr)) {
            long[] ids = c.nextIds(25); // part 1 served, part 2 gets 305: the whole call is redone
            assertEquals(25, ids.length);
            Set<Long> seen = new HashSet<>();
            for (long id : ids) {
                assertTrue(seen.add(id));
            }
            assertTrue(ids[0] >= (1L << 40) + 10, "the IDs of the first connection's answered part are dropped");
        }
    }

    @Test
    void rangeChangedWithRequestsInFlightFromSeveralThreads() throws Exception {
        try (Support.Fake f = new Support.Fake(Support.Mode.RANGE_CHANGED, 0, 10, hello(65536, 5), hello(65536, 9));
                IdgenClient c = IdgenClient.create(f.addr)) {
            c.nextId();
            ExecutorService pool = Executors.newFixedThreadPool(4);
            List<Future<List<Long>>> rs = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                rs.add(pool.submit(() -> {
                    List<Long> got = new ArrayList<>();
                    for (int i = 0; i < 25; i++) {
                        for (long id : c.nextIds(2)) {
                            got.add(id);
                        }
                    }
                    return got;
                }));
            }
            Set<Long> all = new HashSet<>();
            for (Future<List<Long>> r : rs) {
                for (long id : r.get(30, TimeUnit.SECONDS)) {
                    assertTrue(all.add(id));
                }
            }
            pool.shutdownNow();
            assertEquals(200, all.size());
            assertEquals(0, c.stats().nodeFailures());
        }
    }

    @Test
    void aNodeWithAnotherLayoutIsRefused() throws Exception {
        try (Support.Fake a = new Support.Fake(Support.Mode.SERVE, 0, 0, hello(65536, 0), null);
                Support.Fake b = new Support.Fake(Support.Mode.SERVE, 0, 0,
                        Support.helloOk(2, EPOCH + 1, 0, 65536, 1, 1), null);
                IdgenClient ca = IdgenClient.create(a.addr);
                IdgenClient both = IdgenClient.builder().nodes(a.addr, b.addr).build()) {
            ca.nextId();
            // The layout comes from whichever node connected first (usually a; under load its
            // connect may lose to b's): stop the node whose layout the client holds (read from
            // the client itself, not inferred from its preferred node), and the other's layout
            // is refused.
            both.nextId();
            boolean fromA = both.layout().equals(ca.layout());
            (fromA ? a : b).kill();
            IdgenException e = assertThrows(IdgenException.class, () -> both.nextIds(1));
            assertTrue(e.getMessage().contains("layout"), e.getMessage());
        }
    }

    @Test
    void version1NodesAreServedWithGetIds() throws Exception {
        try (Support.Fake v1 = new Support.Fake(Support.Mode.SERVE, 0, 0, Support.helloOk(1, EPOCH, 0, 100, 0, 1), null);
                IdgenClient c = IdgenClient.create(v1.addr)) {
            long[] ids = c.nextIds(250);
            assertEquals(250, ids.length);
            assertEquals(1, c.nodes().get(0).hello().version());
            assertEquals(3, v1.requests.get(), "GET_IDS split at max_batch 100");
        }
    }
}
