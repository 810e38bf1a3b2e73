package dev.idgen.client;

/**
 * A mask keyring that cannot be read, or an ID, masked form, key id or width that masking
 * refuses ({@link MaskKeyring}). The message says why and never holds key material.
 */
public class MaskException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public MaskException(String message) {
        super(message);
    }
}
