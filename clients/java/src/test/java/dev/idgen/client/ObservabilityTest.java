package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The events of CONFIG.md ("Observability"): logged through System.getLogger("dev.idgen.client")
 * (captured here through java.util.logging, the JDK's default System.Logger backend) and given
 * to the listener; a throwing listener is logged once and never breaks a call.
 */
class ObservabilityTest {
    /** The JUL logger behind System.getLogger("dev.idgen.client"); held so that it is not collected. */
    static final Logger JUL = Logger.getLogger("dev.idgen.client");
    final List<LogRecord> records = new CopyOnWriteArrayList<>();
    final Handler capture = new Handler() {
        @Override
        public void publish(LogRecord r) {
            records.add(r);
        }

        @Override
        public void flush() {}

        @Override
        public void close() {}
    };
    Level saved;

    @BeforeEach
    void capture() {
        saved = JUL.getLevel();
        capture.setLevel(Level.ALL);
        JUL.addHandler(capture);
    }

    @AfterEach
    void release() {
        JUL.removeHandler(capture);
        JUL.setLevel(saved);
    }

    List<String> logged(Level atLeast) {
        return records.stream().filter(r -> r.getLevel().intValue() >= atLeast.intValue()).map(LogRecord::getMessage)
                .collect(Collectors.toList());
    }

    static IdgenEvent first(List<IdgenEvent> events, String name) {
        return events.stream().filter(e -> e.name().equals(name)).findFirst()
                .orElseThrow(() -> new AssertionError("no " + name + " event in " + events));
    }

    @Test
    void failoverIsLoggedAtWarningAndReachesTheListenerWithItsFields() throws Exception {
        JUL.setLevel(Level.ALL);
        List<IdgenEvent> events = new CopyOnWriteArrayList<>();
        try (Support.Node doomed = Support.Node.memory("--region-bits", "1", "--region", "0");
                Support.Node survivor = Support.Node.memory("--region-bits", "1", "--region", "1");
                IdgenClient c = IdgenClient.builder().nodes(doomed.addr, survivor.addr).listener(events::add)
                        .requestTimeout(Duration.ofSeconds(2)).build()) {
            assertEquals(4, c.nextIds(4).length);
            IdgenEvent connect = first(events, "connect");
            assertEquals(doomed.addr, connect.get("node"));
            assertEquals(doomed.addr, connect.get("address"));
            assertEquals(5, connect.get("version"));
            assertTrue(connect.get("duration") instanceof Duration);
            IdgenEvent request = first(events, "request");
            assertEquals("ids", request.get("op"));
            assertEquals(4, request.get("count"));
            assertEquals(doomed.addr, request.get("node"));
            assertEquals("ok", request.get("outcome"));

            doomed.kill();
            assertEquals(1, c.decode(c.nextIds(4)[0]).region(), "the survivor answered");
            IdgenEvent down = first(events, "node_down");
            assertEquals(doomed.addr, down.get("node"));
            assertTrue(((String) down.get("reason")).length() > 0);
            IdgenEvent failover = first(events, "failover");
            assertEquals(doomed.addr, failover.get("from"));
            assertEquals(survivor.addr, failover.get("to"));
            assertTrue(failover.get("reason") != null);
            assertEquals(survivor.addr, events.stream().filter(e -> e.name().equals("request")).reduce((a, b) -> b)
                    .orElseThrow().get("node"), "the last request was answered by the survivor");

            List<String> warnings = logged(Level.WARNING);
            assertTrue(warnings.stream().anyMatch(m -> m.contains("failover from=" + doomed.addr + " to=" + survivor.addr)),
                    warnings.toString());
            assertTrue(warnings.stream().anyMatch(m -> m.contains("node_down node=" + doomed.addr)), warnings.toString());
            // Routine events are DEBUG (java.util.logging FINE): below the default INFO.
            assertTrue(records.stream().anyMatch(r -> r.getLevel() == Level.FINE && r.getMessage().contains("request op=ids")));
        }
    }

    @Test
    void routineEventsAreQuietAtTheDefaultLevel() throws Exception {
        JUL.setLevel(null); // inherit the root's INFO, as in a program that configured nothing
        List<IdgenEvent> events = new CopyOnWriteArrayList<>();
        try (Support.Node node = Support.Node.memory();
                IdgenClient c = IdgenClient.builder().nodes(node.addr).listener(events::add).build()) {
            for (int i = 0; i < 5; i++) {
                c.nextIds(10);
            }
            c.ping();
            assertTrue(events.stream().filter(e -> e.name().equals("request")).count() >= 6, events.toString());
            assertTrue(events.stream().anyMatch(e -> e.name().equals("connect")));
            assertEquals(List.of(), logged(Level.ALL), "connects and requests log nothing at INFO");
        }
    }

    @Test
    void aRefusalIsAnEventWithTheStatus() throws Exception {
        JUL.setLevel(Level.ALL);
        List<IdgenEvent> events = new CopyOnWriteArrayList<>();
        try (Support.Node node = Support.Node.memory();
                IdgenClient c = IdgenClient.builder().nodes(node.addr).listener(events::add).build()) {
            // A node without --idempotency-window refuses keys: 205 INVALID_OPTION.
            ServerException e = assertThrows(ServerException.class,
                    () -> c.nextIds(2, IdOptions.builder().idempotencyKey("k-1").build()));
            assertEquals(Status.INVALID_OPTION, e.status());
            IdgenEvent refused = first(events, "refused");
            assertEquals(node.addr, refused.get("node"));
            assertEquals("ids_with", refused.get("op"));
            assertEquals(Status.INVALID_OPTION, refused.get("status"));
            assertEquals("INVALID_OPTION", refused.get("status_name"));
            assertTrue(refused.get("message") instanceof String);
            IdgenEvent request = first(events, "request");
            assertEquals("INVALID_OPTION", request.get("outcome"));
            assertTrue(records.stream().anyMatch(r -> r.getLevel() == Level.INFO && r.getMessage().contains("refused")));
        }
    }

    @Test
    void aCallReturnsAfterItsRequestEvent() throws Exception {
        // The request event is emitted before the call's result reaches the caller: a
        // blocking call that returned (or threw) finds its event there, every time.
        List<IdgenEvent> events = new CopyOnWriteArrayList<>();
        try (Support.Node node = Support.Node.memory();
                IdgenClient c = IdgenClient.builder().nodes(node.addr).listener(events::add).build()) {
            IdOptions keyed = IdOptions.builder().idempotencyKey("k-1").build();
            for (int i = 1; i <= 300; i++) {
                if (i % 2 == 0) {
                    c.nextIds(1);
                } else {
                    assertThrows(ServerException.class, () -> c.nextIds(1, keyed));
                }
                final int calls = i;
                assertEquals(calls, events.stream().filter(e -> e.name().equals("request")).count(),
                        "request events after call " + calls);
            }
        }
    }

    @Test
    void aThrowingListenerIsLoggedOnceAndCallsGoOn() throws Exception {
        List<String> seen = new CopyOnWriteArrayList<>();
        try (Support.Node node = Support.Node.memory();
                IdgenClient c = IdgenClient.builder().nodes(node.addr).listener(e -> {
                    seen.add(e.name());
                    throw new IllegalStateException("listener bug");
                }).build()) {
            for (int i = 0; i < 5; i++) {
                assertEquals(3, c.nextIds(3).length);
            }
            assertTrue(c.ping().toMillis() < 5000);
            assertTrue(seen.size() >= 7, "every event still reached the listener: " + seen);
            List<LogRecord> about = records.stream().filter(r -> r.getMessage().contains("listener threw"))
                    .collect(Collectors.toList());
            assertEquals(1, about.size(), "logged once");
            assertEquals(Level.WARNING, about.get(0).getLevel());
            assertTrue(about.get(0).getThrown() instanceof IllegalStateException);
        }
    }
}
