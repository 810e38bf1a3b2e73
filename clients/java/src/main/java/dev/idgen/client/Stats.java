package dev.idgen.client;

import java.util.concurrent.atomic.LongAdder;

/** The client's counters (see {@link IdgenClient#stats()}). */
final class Stats {
    final LongAdder connects = new LongAdder();
    final LongAdder requests = new LongAdder();
    final LongAdder ids = new LongAdder();
    final LongAdder pings = new LongAdder();
    final LongAdder nodeFailures = new LongAdder();
    final LongAdder failovers = new LongAdder();
    final LongAdder rangeChanges = new LongAdder();
    final LongAdder prefetchRefills = new LongAdder();
    final LongAdder prefetchServed = new LongAdder();
    final LongAdder valueRequests = new LongAdder();
    final LongAdder values = new LongAdder();
    final LongAdder uuidRequests = new LongAdder();
    final LongAdder uuids = new LongAdder();
}
