package dev.idgen.client;

import java.lang.System.Logger;
import java.lang.System.Logger.Level;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

/** Emits a client's events to System.getLogger("dev.idgen.client") and to its listener. */
final class Events {
    static final Logger LOG = System.getLogger("dev.idgen.client");

    private final IdgenListener listener;
    private final AtomicBoolean listenerFailed = new AtomicBoolean();

    Events(IdgenListener listener) {
        this.listener = listener;
    }

    static Level level(String name) {
        return switch (name) {
            case "connect", "request" -> Level.DEBUG;
            case "refused", "node_up" -> Level.INFO;
            default -> Level.WARNING; // connect_failed, failover, node_down
        };
    }

    /** Whether anyone would see {@code name}: a listener, or the logger at its level. */
    boolean wanted(String name) {
        return listener != null || LOG.isLoggable(level(name));
    }

    /** The event {@code name} with fields {@code k1, v1, k2, v2, ...}. */
    void emit(String name, Object... kv) {
        Level level = level(name);
        boolean log = LOG.isLoggable(level);
        if (listener == null && !log) {
            return;
        }
        Map<String, Object> fields = new LinkedHashMap<>();
        for (int i = 0; i + 1 < kv.length; i += 2) {
            fields.put((String) kv[i], kv[i + 1]);
        }
        IdgenEvent e = new IdgenEvent(name, Collections.unmodifiableMap(fields));
        if (log) {
            LOG.log(level, "idgen client: " + e);
        }
        if (listener != null) {
            try {
                listener.onEvent(e);
            } catch (RuntimeException | Error t) {
                if (t instanceof VirtualMachineError v) {
                    throw v;
                }
                if (listenerFailed.compareAndSet(false, true)) {
                    LOG.log(Level.WARNING, "idgen client: the listener threw on a " + name
                            + " event (logged once; its exceptions are ignored)", t);
                }
            }
        }
    }
}
