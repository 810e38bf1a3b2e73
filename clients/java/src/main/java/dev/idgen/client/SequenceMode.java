package dev.idgen.client;

/**
 * A named sequence's mode, as the node's VALUES answer says it (protocol/PROTOCOL.md 4.6,
 * docs/ARCHITECTURE.md §6).
 */
public enum SequenceMode {
    /**
     * Wire byte 0: values come from blocks a node reserved ahead; values of several nodes
     * interleave. A client may keep such values for later calls (sequence prefetch).
     */
    DENSE,
    /**
     * Wire byte 1: each value is reserved by a store commit made after its request arrived, so
     * a call that starts after another one's answer gets larger values. Never kept for later
     * calls.
     */
    STRICT;

    /** The mode of a wire byte, or {@code null} for a byte this client does not know. */
    static SequenceMode ofByte(int b) {
        return switch (b) {
            case 0 -> DENSE;
            case 1 -> STRICT;
            default -> null;
        };
    }

    /** The wire byte. */
    int wireByte() {
        return this == DENSE ? 0 : 1;
    }
}
