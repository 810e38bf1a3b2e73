package dev.idgen.client;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A call tried several nodes and none could serve it. {@link #errors()} holds each node's last
 * error; each is also a suppressed exception.
 */
public class NoNodeAvailableException extends UnavailableException {
    private static final long serialVersionUID = 1L;
    private final Map<String, Throwable> errors;

    public NoNodeAvailableException(Map<String, Throwable> errors) {
        super(describe(errors), null);
        this.errors = Collections.unmodifiableMap(new LinkedHashMap<>(errors));
        for (Throwable t : errors.values()) {
            if (t != null) {
                addSuppressed(t);
            }
        }
    }

    private static String describe(Map<String, Throwable> errors) {
        StringBuilder b = new StringBuilder("no idgen node available");
        for (Map.Entry<String, Throwable> e : errors.entrySet()) {
            b.append("; ").append(e.getKey()).append(": ");
            b.append(e.getValue() == null ? "not tried" : e.getValue().getMessage());
        }
        return b.toString();
    }

    /** Each node ({@code host:port}) and the error of its attempt in this call. */
    public Map<String, Throwable> errors() {
        return errors;
    }
}
