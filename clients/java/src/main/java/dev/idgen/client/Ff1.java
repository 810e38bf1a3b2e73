package dev.idgen.client;

import java.math.BigInteger;
import java.security.GeneralSecurityException;
import javax.crypto.Cipher;
import javax.crypto.spec.SecretKeySpec;

/**
 * FF1 format-preserving encryption, NIST SP 800-38G (Algorithm 7 encrypt, Algorithm 8
 * decrypt), with AES as the block cipher. {@link MaskKeyring} uses it with radix 2; it is
 * general (radix 2 .. 2^16, any length NIST allows) so NIST's published samples test it.
 * Thread-safe: each thread has its own AES cipher.
 */
final class Ff1 {
    private static final int ROUNDS = 10;
    private static final int MAX_RADIX = 1 << 16;
    private static final BigInteger MIN_DOMAIN = BigInteger.valueOf(1_000_000);

    private final ThreadLocal<Cipher> aes;

    /** FF1 under an AES key of 16, 24 or 32 bytes. */
    Ff1(byte[] key) {
        if (key.length != 16 && key.length != 24 && key.length != 32) {
            throw new IllegalArgumentException("an FF1 key is 16, 24 or 32 bytes");
        }
        SecretKeySpec spec = new SecretKeySpec(key, "AES");
        this.aes = ThreadLocal.withInitial(() -> {
            try {
                Cipher c = Cipher.getInstance("AES/ECB/NoPadding");
                c.init(Cipher.ENCRYPT_MODE, spec);
                return c;
            } catch (GeneralSecurityException e) {
                throw new IllegalStateException("AES is not available", e);
            }
        });
        aes.get(); // fail here, not at the first use, if AES is missing
    }

    int[] encrypt(byte[] tweak, int[] x, int radix) {
        return run(tweak, x, radix, false);
    }

    int[] decrypt(byte[] tweak, int[] x, int radix) {
        return run(tweak, x, radix, true);
    }

    /** One AES block: ECB without padding turns each 16-byte update into one block out. */
    private void ciph(byte[] in, byte[] out, int at) {
        try {
            if (aes.get().update(in, 0, 16, out, at) != 16) {
                throw new IllegalStateException("AES returned a partial block");
            }
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("AES failed", e);
        }
    }

    /** NUM_radix(X): X[0] most significant. */
    static BigInteger num(int[] x, int from, int to, int radix) {
        BigInteger r = BigInteger.valueOf(radix);
        BigInteger n = BigInteger.ZERO;
        for (int i = from; i < to; i++) {
            n = n.multiply(r).add(BigInteger.valueOf(x[i]));
        }
        return n;
    }

    /** STR^m_radix(v): m digits, most significant first. */
    static int[] str(BigInteger v, int radix, int m) {
        int[] out = new int[m];
        BigInteger r = BigInteger.valueOf(radix);
        for (int i = m - 1; i >= 0; i--) {
            BigInteger[] qr = v.divideAndRemainder(r);
            out[i] = qr[1].intValue();
            v = qr[0];
        }
        return out;
    }

    private static void check(int[] x, int radix) {
        if (radix < 2 || radix > MAX_RADIX) {
            throw new IllegalArgumentException("FF1: radix must be in 2 .. 65536");
        }
        if (x.length < 2) {
            throw new IllegalArgumentException("FF1: numeral string length out of range");
        }
        if (BigInteger.valueOf(radix).pow(x.length).compareTo(MIN_DOMAIN) < 0) {
            throw new IllegalArgumentException("FF1: radix^length is below 1,000,000");
        }
        for (int d : x) {
            if (d < 0 || d >= radix) {
                throw new IllegalArgumentException("FF1: a numeral is not below the radix");
            }
        }
    }

    private int[] run(byte[] tweak, int[] x, int radix, boolean decrypt) {
        check(x, radix);
        int n = x.length;
        int t = tweak.length;
        int u = n / 2;
        int v = n - u;
        int[] a = java.util.Arrays.copyOfRange(x, 0, u);
        int[] b = java.util.Arrays.copyOfRange(x, u, n);
        BigInteger bigRadix = BigInteger.valueOf(radix);
        BigInteger ru = bigRadix.pow(u);
        BigInteger rv = bigRadix.pow(v);
        // ceil(v * log2(radix)) is the bit length of radix^v - 1.
        int bLen = (rv.subtract(BigInteger.ONE).bitLength() + 7) / 8;
        int d = 4 * ((bLen + 3) / 4) + 4;
        byte[] p = {1, 2, 1, (byte) (radix >>> 16), (byte) (radix >>> 8), (byte) radix, 10, (byte) u,
            (byte) (n >>> 24), (byte) (n >>> 16), (byte) (n >>> 8), (byte) n,
            (byte) (t >>> 24), (byte) (t >>> 16), (byte) (t >>> 8), (byte) t};
        int zeros = Math.floorMod(-t - bLen - 1, 16);
        int qLen = t + zeros + 1 + bLen;
        byte[] pq = new byte[16 + qLen];
        System.arraycopy(p, 0, pq, 0, 16);
        System.arraycopy(tweak, 0, pq, 16, t);
        int blocks = (d + 15) / 16;
        byte[] s = new byte[blocks * 16];
        for (int step = 0; step < ROUNDS; step++) {
            int i = decrypt ? ROUNDS - 1 - step : step;
            int[] in = decrypt ? a : b;
            pq[16 + t + zeros] = (byte) i;
            byte[] numIn = num(in, 0, in.length, radix).toByteArray(); // may have a leading 0 byte
            int numStart = 16 + t + zeros + 1;
            java.util.Arrays.fill(pq, numStart, pq.length, (byte) 0);
            int copy = Math.min(numIn.length, bLen);
            System.arraycopy(numIn, numIn.length - copy, pq, pq.length - copy, copy);
            // PRF: CBC-MAC with a zero IV.
            byte[] r = new byte[16];
            for (int off = 0; off < pq.length; off += 16) {
                for (int j = 0; j < 16; j++) {
                    r[j] ^= pq[off + j];
                }
                ciph(r, r, 0);
            }
            System.arraycopy(r, 0, s, 0, 16);
            for (int j = 1; j < blocks; j++) {
                byte[] blk = r.clone();
                for (int k = 0; k < 4; k++) {
                    blk[15 - k] ^= (byte) (j >>> (8 * k));
                }
                ciph(blk, s, 16 * j);
            }
            BigInteger y = new BigInteger(1, java.util.Arrays.copyOf(s, d));
            boolean even = i % 2 == 0;
            int m = even ? u : v;
            BigInteger mod = even ? ru : rv;
            BigInteger c = decrypt
                    ? num(b, 0, b.length, radix).subtract(y).mod(mod)
                    : num(a, 0, a.length, radix).add(y).mod(mod);
            int[] out = str(c, radix, m);
            if (decrypt) {
                b = a;
                a = out;
            } else {
                a = b;
                b = out;
            }
        }
        int[] result = new int[n];
        System.arraycopy(a, 0, result, 0, a.length);
        System.arraycopy(b, 0, result, a.length, b.length);
        return result;
    }
}
