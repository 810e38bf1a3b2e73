package dev.idgen.client;

/**
 * The base class of every error the client reports (except {@link IllegalArgumentException}
 * for bad arguments and {@link IdFormatException} for unparsable ID text).
 *
 * <p>Subclasses: {@link ProtocolException} (the node broke the protocol), {@link
 * ServerException} (the node answered with an ERROR frame), {@link UnavailableException}
 * (a node could not be reached, closed, or did not answer in time; {@link TlsException} and
 * {@link NoNodeAvailableException} are kinds of it), {@link DeadlineExceededException} (the
 * call's deadline ran out), {@link SequencesUnsupportedException} (a node without named
 * sequences) and {@link ClientClosedException}.
 *
 * <p>Retrying a failed call is always safe: a node never sends an ID twice, so a failed call
 * leaves at most a gap in the ID space, never a duplicate.
 */
public class IdgenException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String node;

    public IdgenException(String message, String node, Throwable cause) {
        super(node == null ? message : node + ": " + message, cause);
        this.node = node;
    }

    /** The node ({@code host:port}) this error is about, or {@code null}. */
    public String node() {
        return node;
    }
}
