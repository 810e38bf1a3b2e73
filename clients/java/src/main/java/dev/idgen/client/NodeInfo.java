package dev.idgen.client;

import java.time.Duration;

/**
 * A snapshot of one node's health, from {@link IdgenClient#nodes()}.
 *
 * @param address the node as given to the builder ({@code host:port})
 * @param connected whether the client holds an open connection to it
 * @param downFor how much longer the node is skipped (zero when healthy)
 * @param failures consecutive failures (reset by a success)
 * @param lastError the error of its last failure, or {@code null}
 * @param hello the HELLO_OK of its open connection, or {@code null}
 * @param current whether calls go to this node first
 */
public record NodeInfo(String address, boolean connected, Duration downFor, int failures,
        Throwable lastError, Frames.HelloOk hello, boolean current) {}
