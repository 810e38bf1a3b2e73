package dev.idgen.client;

/** ID text (decimal, base62, base32) that cannot be parsed; the message says why. */
public class IdFormatException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public IdFormatException(String message) {
        super(message);
    }
}
