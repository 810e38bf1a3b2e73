package dev.idgen.client;

/**
 * The node negotiated a protocol version below 5, which has no GET_IDS_WITH: a call with {@link
 * IdOptions} or for masked IDs fails at once, nothing is sent and no other node is tried (the
 * client never drops {@code after}, the key or masking to fall back on GET_IDS). Upgrade the node.
 */
public class IdsWithUnsupportedException extends IdgenException {
    private static final long serialVersionUID = 1L;
    private final int version;

    public IdsWithUnsupportedException(int version, String node) {
        super("the node is too old: it speaks protocol version " + version + "; after, idempotency keys and"
                + " masked IDs need protocol version " + Frames.IDS_WITH_VERSION + " (nothing was sent)", node, null);
        this.version = version;
    }

    /** The protocol version the node negotiated (1 to 4). */
    public int version() {
        return version;
    }
}
