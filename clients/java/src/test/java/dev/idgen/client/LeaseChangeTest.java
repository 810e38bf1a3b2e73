package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * A real lease change: nodes on one etcd share a worker space of two worker IDs. Node A holds
 * worker 0 and B worker 1. A is stopped past its lease, C takes worker 0, B stops (releasing
 * worker 1) and A resumes: it lost worker 0, takes worker 1, and answers its connections with
 * RANGE_CHANGED. The client reconnects, learns the new range, and no ID repeats anywhere.
 */
class LeaseChangeTest {
    static List<String> args(Support.Etcd etcd, String name) {
        return List.of("--store", etcd.store("javatest"), "--node-id", name, "--shards", "1", "--lease-ttl", "1s",
                "--lease-safety", "1s", "--worker-bits", "1", "--timestamp-bits", "41", "--sequence-bits", "21");
    }

    @Test
    void aNodeThatChangesItsWorkerRangeIsReconnectedToAndNoIdRepeats() throws Exception {
        try (Support.Etcd etcd = new Support.Etcd();
                Support.Node a = new Support.Node(args(etcd, "a"));
                Support.Node b = new Support.Node(args(etcd, "b"));
                IdgenClient ca = IdgenClient.builder().nodes(a.addr).backoff(Duration.ofMillis(50), Duration.ofMillis(200))
                        .callDeadline(Duration.ofSeconds(2)).build();
                IdgenClient cb = IdgenClient.create(b.addr)) {
            Set<Long> all = new HashSet<>();
            List<String> errors = new ArrayList<>();
            add(all, ca.nextIds(1000));
            add(all, cb.nextIds(1000));
            long before = ca.nodes().get(0).hello().workerFirst();
            assertEquals(1, ca.nodes().get(0).hello().workerCount());

            a.signal("STOP");
            Thread.sleep(3500); // past the TTL (1 s) and the safety (1 s)
            try (Support.Node c = new Support.Node(args(etcd, "c")); IdgenClient cc = IdgenClient.create(c.addr)) {
                add(all, cc.nextIds(1000));
                assertEquals(before, cc.nodes().get(0).hello().workerFirst(), "C took A's expired worker ID");
                add(all, cb.nextIds(1000));
                cb.close();
                b.stop(); // releases worker 1
                a.signal("CONT");

                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (System.nanoTime() < deadline && ca.stats().rangeChanges() == 0) {
                    try {
                        add(all, ca.nextIds(100));
                    } catch (IdgenException e) {
                        errors.add(e.getMessage()); // e.g. UNAVAILABLE_LEASE while A has no lease
                        Thread.sleep(50);
                    }
                    add(all, cc.nextIds(100));
                }
                assertTrue(ca.stats().rangeChanges() >= 1, "no RANGE_CHANGED seen; errors " + errors + "\n" + a.log());
                long[] after = ca.nextIds(1000);
                add(all, after);
                long now = ca.nodes().get(0).hello().workerFirst();
                assertNotEquals(before, now, "the new HELLO_OK announces the new range");
                for (long id : after) {
                    assertEquals(now, ca.decode(id).worker());
                }
                add(all, cc.nextIds(1000));
            }
        }
    }

    static void add(Set<Long> all, long[] ids) {
        for (long id : ids) {
            assertTrue(all.add(id), "ID " + id + " seen twice");
        }
    }
}
