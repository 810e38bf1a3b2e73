package dev.idgen.client;

/**
 * The TLS handshake with a node failed. A node fault like any other {@link
 * UnavailableException}: the client marks the node down and fails over. A certificate that
 * does not verify is a configuration fault; retrying the same node with the same trust does
 * not help.
 */
public class TlsException extends UnavailableException {
    private static final long serialVersionUID = 1L;

    /** What went wrong, as far as the TLS stack says. */
    public enum Kind {
        /** The node's certificate does not chain to the trusted authorities. */
        UNKNOWN_ISSUER,
        /** The node's certificate does not name the host dialed (or the server name given). */
        NAME_MISMATCH,
        /** The node's certificate is expired or not yet valid. */
        EXPIRED,
        /** The node refused the client certificate (or wanted one and got none). */
        CLIENT_CERTIFICATE_REJECTED,
        /** The node and the client share no application protocol (ALPN). */
        NO_APPLICATION_PROTOCOL,
        /** Any other handshake failure (for example a port that does not speak TLS). */
        HANDSHAKE,
    }

    private final Kind kind;

    public TlsException(Kind kind, String message, String node, Throwable cause) {
        super("TLS: " + message, node, cause);
        this.kind = kind;
    }

    /** The cause's kind. */
    public Kind kind() {
        return kind;
    }
}
