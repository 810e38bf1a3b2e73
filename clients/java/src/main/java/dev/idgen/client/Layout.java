package dev.idgen.client;

/**
 * The ID layout a cluster announces in HELLO_OK: the epoch and the bit widths of timestamp,
 * worker (region bits included) and sequence. {@link #decode(long)} takes an ID apart.
 */
public record Layout(long epochMs, int timestampBits, int workerBits, int sequenceBits, int regionBits) {
    /** An ID taken apart. */
    public record Parts(long unixMs, long timestamp, long worker, long region, long sequence) {}

    /** Takes an ID apart (protocol section 10). */
    public Parts decode(long id) {
        if (id < 0) {
            throw new IllegalArgumentException("ID " + Long.toUnsignedString(id) + " is outside 0 .. 2^63");
        }
        long sequence = id & ((1L << sequenceBits) - 1);
        long worker = (id >>> sequenceBits) & ((1L << workerBits) - 1);
        long region = regionBits == 0 ? 0 : worker >>> (workerBits - regionBits);
        long timestamp = id >>> (workerBits + sequenceBits);
        return new Parts(epochMs + timestamp, timestamp, worker, region, sequence);
    }
}
