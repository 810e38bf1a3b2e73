package dev.idgen.client;

/**
 * The text forms of an ID (clients/vectors/FORMS.md): decimal, base62 (11 characters, sorts
 * like the numbers) and Crockford base32 (13 characters, sorts like the numbers). Every form
 * applies to IDs in {@code 0 .. 2^63}; parsing rejects anything else with an {@link
 * IdFormatException} that says why.
 */
public final class IdForms {
    static final String BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    static final String BASE32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    public static final int BASE62_LENGTH = 11;
    public static final int BASE32_LENGTH = 13;
    private static final int[] B62 = new int[128];
    private static final int[] B32 = new int[128];

    static {
        java.util.Arrays.fill(B62, -1);
        java.util.Arrays.fill(B32, -1);
        for (int i = 0; i < BASE62.length(); i++) {
            B62[BASE62.charAt(i)] = i;
        }
        for (int i = 0; i < BASE32.length(); i++) {
            char c = BASE32.charAt(i);
            B32[c] = i;
            B32[Character.toLowerCase(c)] = i;
        }
        B32['I'] = B32['i'] = B32['L'] = B32['l'] = 1;
        B32['O'] = B32['o'] = 0;
    }

    private IdForms() {}

    private static void checkId(long id) {
        if (id < 0) {
            throw new IllegalArgumentException(
                    "ID " + Long.toUnsignedString(id) + " is outside 0 .. 2^63");
        }
    }

    /** The decimal form. */
    public static String toDecimal(long id) {
        checkId(id);
        return Long.toString(id);
    }

    /** Parses the decimal form: ASCII digits only, at most 19, no leading zeros, below 2^63. */
    public static long parseDecimal(String text) {
        if (text.isEmpty()) {
            throw new IdFormatException("empty decimal ID");
        }
        if (text.length() > 19) {
            throw new IdFormatException("decimal ID of " + text.length() + " digits (at most 19)");
        }
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c < '0' || c > '9') {
                throw new IdFormatException("decimal ID has a non-digit " + quote(c) + " at " + i);
            }
        }
        if (text.length() > 1 && text.charAt(0) == '0') {
            throw new IdFormatException("decimal ID with a leading zero");
        }
        long v = 0;
        for (int i = 0; i < text.length(); i++) {
            int d = text.charAt(i) - '0';
            if (v > (Long.MAX_VALUE - d) / 10) {
                throw new IdFormatException("decimal ID " + text + " is at or above 2^63");
            }
            v = v * 10 + d;
        }
        return v;
    }

    /** The base62 form: 11 characters of {@code 0-9A-Za-z}, most significant first. */
    public static String toBase62(long id) {
        checkId(id);
        char[] out = new char[BASE62_LENGTH];
        for (int i = BASE62_LENGTH - 1; i >= 0; i--) {
            out[i] = BASE62.charAt((int) (id % 62));
            id /= 62;
        }
        return new String(out);
    }

    /** Parses the base62 form: exactly 11 characters, case-sensitive, below 2^63. */
    public static long parseBase62(String text) {
        if (text.isEmpty()) {
            throw new IdFormatException("empty base62 ID");
        }
        if (text.length() != BASE62_LENGTH) {
            throw new IdFormatException(
                    "base62 ID of " + text.length() + " characters (exactly " + BASE62_LENGTH + ")");
        }
        long v = 0;
        for (int i = 0; i < BASE62_LENGTH; i++) {
            char c = text.charAt(i);
            int d = c < 128 ? B62[c] : -1;
            if (d < 0) {
                throw new IdFormatException("base62 ID has " + quote(c) + " at " + i + ", not in the alphabet");
            }
            if (v > (Long.MAX_VALUE - d) / 62) {
                throw new IdFormatException("base62 ID " + text + " is at or above 2^63");
            }
            v = v * 62 + d;
        }
        return v;
    }

    /** The Crockford base32 form: 13 upper-case characters, most significant first. */
    public static String toBase32(long id) {
        checkId(id);
        char[] out = new char[BASE32_LENGTH];
        for (int i = BASE32_LENGTH - 1; i >= 0; i--) {
            out[i] = BASE32.charAt((int) (id & 31));
            id >>>= 5;
        }
        return new String(out);
    }

    /**
     * Parses the Crockford base32 form: exactly 13 characters, case-insensitive, {@code I}/{@code
     * L} read as 1 and {@code O} as 0, no hyphens, below 2^63.
     */
    public static long parseBase32(String text) {
        if (text.isEmpty()) {
            throw new IdFormatException("empty base32 ID");
        }
        if (text.length() != BASE32_LENGTH) {
            throw new IdFormatException(
                    "base32 ID of " + text.length() + " characters (exactly " + BASE32_LENGTH + ")");
        }
        long v = 0;
        for (int i = 0; i < BASE32_LENGTH; i++) {
            char c = text.charAt(i);
            int d = c < 128 ? B32[c] : -1;
            if (d < 0) {
                throw new IdFormatException("base32 ID has " + quote(c) + " at " + i + ", not in the alphabet");
            }
            if (i == 0 && d > 7) {
                throw new IdFormatException("base32 ID " + text + " is at or above 2^63");
            }
            v = (v << 5) | d;
        }
        return v;
    }

    private static String quote(char c) {
        return c >= 0x20 && c < 0x7F ? "'" + c + "'" : String.format("U+%04X", (int) c);
    }
}
