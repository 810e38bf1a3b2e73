package dev.idgen.client;

/**
 * Receives the client's events (clients/vectors/CONFIG.md, "Observability"), for metrics and
 * tracing: called synchronously, on the thread where the event happened (often a connection's
 * reader thread: return quickly, never block), after the fact. An exception it throws is logged
 * once at WARNING on {@code System.getLogger("dev.idgen.client")} and otherwise ignored: a
 * listener can never fail or change a call.
 *
 * <pre>{@code
 * IdgenClient client = IdgenClient.builder().nodes("10.0.0.1:7420")
 *         .listener(e -> { if (e.name().equals("failover")) failovers.increment(); })
 *         .build();
 * }</pre>
 */
@FunctionalInterface
public interface IdgenListener {
    /** One event; see {@link IdgenEvent} for the names and fields. */
    void onEvent(IdgenEvent event);
}
