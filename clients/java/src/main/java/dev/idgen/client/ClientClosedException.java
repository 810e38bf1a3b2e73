package dev.idgen.client;

/** The client was closed by the application. */
public class ClientClosedException extends IdgenException {
    private static final long serialVersionUID = 1L;

    public ClientClosedException(String message) {
        super(message, null, null);
    }
}
