package dev.idgen.client;

/**
 * Options of {@link IdgenClient#nextIds(int, IdOptions)} and {@link
 * IdgenClient#nextMaskedIds(int, IdOptions)} (protocol version 5, GET_IDS_WITH): immutable,
 * built with {@link #builder()}.
 *
 * <ul>
 *   <li>{@code after}: an ID the caller has seen (from any node); every ID answered is greater.
 *       The node waits up to its clock's max_drift for an ID from a clock ahead of it, else
 *       answers 301 UNAVAILABLE_CLOCK; an ID more than 60 s ahead, or not an ID of the cluster,
 *       is 205 INVALID_OPTION. Read-your-writes order for a caller that passes on what it saw.
 *   <li>{@code idempotencyKey}: 1 to 64 visible ASCII bytes ({@code !} to {@code ~}). On a node
 *       with an idempotency window, the same request with the same key gets the same IDs again;
 *       the same key with another request is 206 IDEMPOTENCY_KEY_REUSED. The client sends a
 *       keyed request to ONE node, picked by the key's hash, and never retries it elsewhere.
 * </ul>
 */
public final class IdOptions {
    /** No options: the call is GET_IDS_WITH without option bits. */
    public static final IdOptions NONE = new IdOptions(null, null);

    private final Long after;
    private final String idempotencyKey;

    private IdOptions(Long after, String idempotencyKey) {
        this.after = after;
        this.idempotencyKey = idempotencyKey;
    }

    public static Builder builder() {
        return new Builder();
    }

    /** Options with only {@code after}. */
    public static IdOptions after(long id) {
        return builder().after(id).build();
    }

    /** Options with only an idempotency key. */
    public static IdOptions idempotencyKey(String key) {
        return builder().idempotencyKey(key).build();
    }

    /** The ID every answered ID exceeds, or {@code null}. */
    public Long after() {
        return after;
    }

    /** The idempotency key, or {@code null}. */
    public String key() {
        return idempotencyKey;
    }

    /** A builder of {@link IdOptions}. */
    public static final class Builder {
        private Long after;
        private String key;

        private Builder() {}

        /**
         * Every ID answered is greater than {@code id} (an ID of the cluster, 0 ..= 2^63 - 1).
         *
         * @throws IllegalArgumentException for a negative {@code id}
         */
        public Builder after(long id) {
            if (id < 0) {
                throw new IllegalArgumentException("after " + Long.toUnsignedString(id) + " is not an ID (sign bit set)");
            }
            this.after = id;
            return this;
        }

        /**
         * An idempotency key: 1 to 64 visible ASCII bytes.
         *
         * @throws IllegalArgumentException for another key
         */
        public Builder idempotencyKey(String key) {
            Frames.idempotencyKey(key);
            this.key = key;
            return this;
        }

        public IdOptions build() {
            return new IdOptions(after, key);
        }
    }

    @Override
    public String toString() {
        return "IdOptions{after=" + after + ", idempotencyKey=" + (idempotencyKey == null ? null : "'" + idempotencyKey + "'") + "}";
    }
}
