package dev.idgen.client;

/**
 * The node negotiated a protocol version below 3, which has no named sequences: a
 * {@code nextValue}/{@code nextValues} call to it fails at once, nothing is sent and no other
 * node is tried (clients/vectors/SEQUENCES.md). Upgrade the node, or take the values from its
 * HTTP API ({@code POST /seq/NAME}).
 */
public class SequencesUnsupportedException extends IdgenException {
    private static final long serialVersionUID = 1L;
    private final int version;

    public SequencesUnsupportedException(int version, String node) {
        super("the node speaks protocol version " + version + "; named sequences need version "
                + Frames.SEQUENCES_VERSION + " (nothing was sent)", node, null);
        this.version = version;
    }

    /** The protocol version the node negotiated (1 or 2). */
    public int version() {
        return version;
    }
}
