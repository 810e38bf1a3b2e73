package dev.idgen.client;

/** The node answered a request with an ERROR frame. Act on {@link #status()} only. */
public class ServerException extends IdgenException {
    private static final long serialVersionUID = 1L;
    private final int status;
    private final String serverMessage;

    public ServerException(int status, String serverMessage, String node) {
        super("server error " + status + " " + nameOf(status) + ": " + serverMessage, node, null);
        this.status = status;
        this.serverMessage = serverMessage;
    }

    private static String nameOf(int status) {
        String n = Status.name(status);
        return n == null ? "UNKNOWN" : n;
    }

    /** The status code (see {@link Status}). */
    public int status() {
        return status;
    }

    /** The status name, or {@code null} for a code this client does not know. */
    public String statusName() {
        return Status.name(status);
    }

    /** The node's message, for humans. */
    public String serverMessage() {
        return serverMessage;
    }

    /** Whether another node may serve the request (3xx except EXHAUSTED and SEQUENCE_USED_UP). */
    public boolean retryElsewhere() {
        return Status.retryElsewhere(status);
    }

    /** Whether the node closed the connection after this error. */
    public boolean closesConnection() {
        return Status.closesConnection(status);
    }
}
