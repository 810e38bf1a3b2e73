package dev.idgen.client;

/**
 * The ID layout a cluster announces in HELLO_OK: the epoch and the bit widths of timestamp,
 * worker (region bits included) and sequence. {@link #decode(long)} takes an ID apart;
 * {@link #bounds(long, long)} gives the IDs of a time interval, for a range query.
 */
public record Layout(long epochMs, int timestampBits, int workerBits, int sequenceBits, int regionBits) {
    /** An ID taken apart. */
    public record Parts(long unixMs, long timestamp, long worker, long region, long sequence) {}

    /** A version 7 UUID of idgen taken apart: the ID it was made from, and that ID's fields. */
    public record UuidParts(long id, Parts parts) {}

    /**
     * Takes a version 7 UUID made by a node of this layout apart (protocol section 10.1): the
     * ID it was made from and its fields.
     *
     * @throws IllegalArgumentException saying which check failed: another version, another
     *     variant, or a time before the epoch or past the layout's last millisecond
     */
    public UuidParts decodeUuid(java.util.UUID uuid) {
        java.util.Objects.requireNonNull(uuid, "uuid");
        if (uuid.version() != 7) {
            throw new IllegalArgumentException("UUID " + uuid + " is of version " + uuid.version() + ", not 7");
        }
        long hi = uuid.getMostSignificantBits();
        long lo = uuid.getLeastSignificantBits();
        if ((lo >>> 62) != 0b10) {
            throw new IllegalArgumentException("UUID " + uuid + " is not of RFC 9562's variant (bits 10)");
        }
        long unixMs = hi >>> 16;
        if (unixMs < epochMs) {
            throw new IllegalArgumentException(
                    "UUID " + uuid + ": its time " + unixMs + " ms is before the epoch " + epochMs + " ms");
        }
        if (unixMs > lastUnixMs()) {
            throw new IllegalArgumentException("UUID " + uuid + ": its time " + unixMs
                    + " ms is past the layout's last millisecond " + lastUnixMs());
        }
        // The 74 bits: rand_a (12), then rand_b (62); worker and sequence are their top bits.
        long randA = hi & 0xFFF;
        long randB = lo & ((1L << 62) - 1);
        int lowBits = workerBits + sequenceBits;
        long low = lowBits >= 12
                ? (randA << (lowBits - 12)) | (randB >>> (62 - (lowBits - 12)))
                : randA >>> (12 - lowBits);
        long id = ((unixMs - epochMs) << lowBits) | low;
        return new UuidParts(id, decode(id));
    }


    /** The widest JavaScript-safe layout: every ID of a layout at most 53 bits wide is at most
     * {@code 2^53 - 1}, an exact JavaScript number (and an exact {@code double}). */
    public static final int JS_SAFE_BITS = 53;

    /** The layout's width, timestamp + worker + sequence bits (at most 63): every ID is below
     * {@code 2^idBits()}. */
    public int idBits() {
        return timestampBits + workerBits + sequenceBits;
    }

    /** The layout's largest ID, {@code 2^idBits() - 1}. */
    public long maxId() {
        return idBits() >= 63 ? Long.MAX_VALUE : (1L << idBits()) - 1;
    }

    /** Whether every ID is an exact JavaScript number: the layout is at most 53 bits wide. */
    public boolean jsSafe() {
        return idBits() <= JS_SAFE_BITS;
    }

    /**
     * Takes an ID apart (protocol section 10).
     *
     * @throws IllegalArgumentException for a value outside {@code 0 .. 2^63}, or above
     *     {@link #maxId()} (not an ID of this layout)
     */
    public Parts decode(long id) {
        if (id < 0) {
            throw new IllegalArgumentException("ID " + Long.toUnsignedString(id) + " is outside 0 .. 2^63");
        }
        if (id > maxId()) {
            throw new IllegalArgumentException(id + " is not an ID of this layout: its IDs are " + idBits()
                    + " bits wide, below 2^" + idBits());
        }
        long sequence = id & ((1L << sequenceBits) - 1);
        long worker = (id >>> sequenceBits) & ((1L << workerBits) - 1);
        long region = regionBits == 0 ? 0 : worker >>> (workerBits - regionBits);
        long timestamp = id >>> (workerBits + sequenceBits);
        return new Parts(epochMs + timestamp, timestamp, worker, region, sequence);
    }

    /**
     * The IDs of a time interval: every ID whose time lies in it satisfies {@code lo <= id < hi}
     * (for SQL: {@code WHERE id >= lo AND id < hi}).
     */
    public record Bounds(long lo, long hi) {
        /** The largest ID of the interval ({@code hi - 1}). */
        public long last() {
            return hi - 1;
        }
    }

    /** The last Unix millisecond an ID of this layout can hold (saturating at Long.MAX_VALUE). */
    public long lastUnixMs() {
        long span = timestampBits >= 63 ? Long.MAX_VALUE : (1L << timestampBits) - 1;
        return epochMs > Long.MAX_VALUE - span ? Long.MAX_VALUE : epochMs + span;
    }

    private long timestampAt(String name, long unixMs) {
        if (unixMs < epochMs) {
            throw new TimeBoundsException(TimeBoundsException.Kind.BEFORE_EPOCH,
                    name + " " + unixMs + " ms is before the layout's epoch " + epochMs + " ms: no ID has that time");
        }
        if (unixMs > lastUnixMs()) {
            throw new TimeBoundsException(TimeBoundsException.Kind.AFTER_LAST,
                    name + " " + unixMs + " ms is after the layout's last timestamp " + lastUnixMs()
                            + " ms: no ID has that time");
        }
        return unixMs - epochMs;
    }

    /**
     * The smallest ID at {@code unixMs} (ms since the Unix epoch): worker 0, sequence 0.
     *
     * @throws TimeBoundsException for a time before the epoch or after {@link #lastUnixMs()}
     */
    public long minIdAt(long unixMs) {
        return timestampAt("time", unixMs) << (workerBits + sequenceBits);
    }

    /**
     * The largest ID at {@code unixMs}: the last worker of the last region, the last sequence.
     *
     * @throws TimeBoundsException for a time before the epoch or after {@link #lastUnixMs()}
     */
    public long maxIdAt(long unixMs) {
        int shift = workerBits + sequenceBits;
        return (timestampAt("time", unixMs) << shift) | ((1L << shift) - 1);
    }

    /**
     * The IDs of the interval {@code [fromMs, toMs)}: every ID whose time lies in it, and no
     * other, satisfies {@code lo <= id < hi}. {@code toMs} may be at most {@link #lastUnixMs()},
     * so {@code hi} always fits a {@code long}.
     *
     * @throws TimeBoundsException for a time the layout cannot hold, or {@code toMs <= fromMs}
     */
    public Bounds bounds(long fromMs, long toMs) {
        int shift = workerBits + sequenceBits;
        long lo = timestampAt("from", fromMs) << shift;
        if (toMs <= fromMs) {
            throw new TimeBoundsException(TimeBoundsException.Kind.EMPTY,
                    "the interval [" + fromMs + ", " + toMs + ") ms is empty: the end must be after the start");
        }
        return new Bounds(lo, timestampAt("to", toMs) << shift);
    }
}
