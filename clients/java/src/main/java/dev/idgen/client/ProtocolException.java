package dev.idgen.client;

/**
 * The node sent a malformed frame, or a well-formed frame that does not answer the request it
 * stands for. The connection is dropped and the node counts as failed.
 */
public class ProtocolException extends IdgenException {
    private static final long serialVersionUID = 1L;
    private final int status;

    /** {@code status}: 100 BAD_FRAME or 101 FRAME_TOO_LARGE for a framing fault, 0 otherwise. */
    public ProtocolException(String message, int status, String node) {
        super("protocol error: " + message, node, null);
        this.status = status;
    }

    /** The wire status of a framing fault (100 or 101), or 0 for an answer that does not fit. */
    public int status() {
        return status;
    }

    ProtocolException withNode(String node) {
        if (node() != null) {
            return this;
        }
        String m = getMessage().substring("protocol error: ".length());
        return new ProtocolException(m, status, node);
    }
}
