package dev.idgen.client;

/** The call's deadline ran out before any node answered it. */
public class DeadlineExceededException extends IdgenException {
    private static final long serialVersionUID = 1L;

    public DeadlineExceededException(String message, Throwable cause) {
        super(message, null, cause);
    }
}
