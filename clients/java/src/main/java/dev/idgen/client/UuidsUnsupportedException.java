package dev.idgen.client;

/**
 * The node negotiated a protocol version below 4, which has no UUIDs: a {@code nextUuid}/{@code
 * nextUuids} call to it fails at once, nothing is sent and no other node is tried. Upgrade the
 * node, or take UUIDs from its HTTP API ({@code POST /uuids}) once it has one.
 */
public class UuidsUnsupportedException extends IdgenException {
    private static final long serialVersionUID = 1L;
    private final int version;

    public UuidsUnsupportedException(int version, String node) {
        super("the node speaks protocol version " + version + "; UUIDs need protocol version "
                + Frames.UUIDS_VERSION + " (nothing was sent)", node, null);
        this.version = version;
    }

    /** The protocol version the node negotiated (1, 2 or 3). */
    public int version() {
        return version;
    }
}
