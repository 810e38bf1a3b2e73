package dev.idgen.client;

/**
 * Keyed, reversible, collision-free masking of IDs (clients/vectors/FORMS.md): a permutation
 * of {@code 0 .. 2^63} under a 128-bit key (a 6-round Feistel network with cycle walking).
 *
 * <p>Masked IDs keep creation time and worker out of public view. They are <b>not</b>
 * secret and not security tokens: every holder of the key can unmask them.
 */
public final class MaskKey {
    private final long k0;
    private final long k1;

    /** A key from its 16 bytes. */
    public MaskKey(byte[] key) {
        if (key.length != 16) {
            throw new IdFormatException("a mask key is 16 bytes, not " + key.length);
        }
        long a = 0;
        long b = 0;
        for (int i = 0; i < 8; i++) {
            a = (a << 8) | (key[i] & 0xFF);
            b = (b << 8) | (key[i + 8] & 0xFF);
        }
        this.k0 = a;
        this.k1 = b;
    }

    /** A key from 32 hex digits. */
    public static MaskKey fromHex(String hex) {
        if (hex.length() != 32) {
            throw new IdFormatException("a mask key is 32 hex digits, not " + hex.length() + " characters");
        }
        byte[] key = new byte[16];
        for (int i = 0; i < 16; i++) {
            int hi = Character.digit(hex.charAt(2 * i), 16);
            int lo = Character.digit(hex.charAt(2 * i + 1), 16);
            if (hi < 0 || lo < 0) {
                throw new IdFormatException("a mask key holds a character that is not a hex digit");
            }
            key[i] = (byte) ((hi << 4) | lo);
        }
        return new MaskKey(key);
    }

    static long mix64(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    private long round(long i, long r) {
        return (mix64(k0 ^ ((i << 32) | r)) ^ k1) & 0xFFFF_FFFFL;
    }

    private long encrypt(long x) {
        long l = x >>> 32;
        long r = x & 0xFFFF_FFFFL;
        for (int i = 0; i < 6; i++) {
            long t = r;
            r = l ^ round(i, r);
            l = t;
        }
        return (l << 32) | r;
    }

    private long decrypt(long y) {
        long l = y >>> 32;
        long r = y & 0xFFFF_FFFFL;
        for (int i = 5; i >= 0; i--) {
            long t = l;
            l = r ^ round(i, l);
            r = t;
        }
        return (l << 32) | r;
    }

    /** The public form of an ID in {@code 0 .. 2^63}. */
    public long mask(long id) {
        if (id < 0) {
            throw new IllegalArgumentException("ID " + Long.toUnsignedString(id) + " is outside 0 .. 2^63");
        }
        long y = encrypt(id);
        while (y < 0) { // at or above 2^63: walk the cycle (ends: E is a permutation)
            y = encrypt(y);
        }
        return y;
    }

    /** The ID a masked value stands for. */
    public long unmask(long masked) {
        if (masked < 0) {
            throw new IllegalArgumentException(
                    "masked ID " + Long.toUnsignedString(masked) + " is outside 0 .. 2^63");
        }
        long x = decrypt(masked);
        while (x < 0) {
            x = decrypt(x);
        }
        return x;
    }

    @Override
    public String toString() {
        return "MaskKey(...)"; // never print the key
    }
}
