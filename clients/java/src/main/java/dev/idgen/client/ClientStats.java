package dev.idgen.client;

/**
 * The client's counters.
 *
 * @param connects connections opened (handshake completed)
 * @param requests GET_IDS or GET_RANGES frames sent
 * @param ids IDs received
 * @param pings PING frames sent
 * @param nodeFailures a node marked down
 * @param failovers a call moved on to another node
 * @param rangeChanges RANGE_CHANGED answers followed by a reconnect to the same node
 * @param prefetchRefills refills of the prefetch pool
 * @param prefetchServed IDs handed out from the prefetch pool
 * @param valueRequests GET_VALUES frames sent (named sequences; prefetch included)
 * @param values values of named sequences received
 * @param uuidRequests GET_UUIDS frames sent
 * @param uuids version 7 UUIDs received
 */
public record ClientStats(long connects, long requests, long ids, long pings, long nodeFailures,
        long failovers, long rangeChanges, long prefetchRefills, long prefetchServed, long valueRequests,
        long values, long uuidRequests, long uuids) {}
