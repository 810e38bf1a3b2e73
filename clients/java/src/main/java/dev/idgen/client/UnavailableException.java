package dev.idgen.client;

/**
 * A node could not serve the call: connection refused or reset, closed with the request
 * unanswered, or no answer within the request timeout.
 */
public class UnavailableException extends IdgenException {
    private static final long serialVersionUID = 1L;

    public UnavailableException(String message, String node) {
        super(message, node, null);
    }

    public UnavailableException(String message, String node, Throwable cause) {
        super(message, node, cause);
    }
}
