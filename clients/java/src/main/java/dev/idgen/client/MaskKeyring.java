package dev.idgen.client;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Masking of IDs (clients/vectors/MASK.md): FF1 format-preserving encryption (NIST SP 800-38G,
 * AES) over an ID's bits, a keyed one-to-one map of {@code 0 .. 2^width} onto itself. A masked
 * ID tells nothing of creation time or worker to anyone without the key, and two IDs never
 * share a masked form.
 *
 * <p>A keyring holds keys under key ids 0..61. The first key of its text is the current one,
 * which masks; every key unmasks. A masked string names its key (its first character); a
 * masked integer does not, so unmasking one masked under an older key needs that key's id.
 * A keyring never prints its keys.
 */
public final class MaskKeyring {
    /** The bit width of the default layout's IDs. */
    public static final int DEFAULT_WIDTH = 63;
    /** The narrowest width masking is defined for (FF1 with radix 2 needs 20 digits). */
    public static final int MIN_WIDTH = 20;
    /** The widest width masking is defined for. */
    public static final int MAX_WIDTH = 63;
    /** The largest key id (one base62 character). */
    public static final int MAX_KEY_ID = 61;
    /** The length of a masked string: a key-id character, then 11 base62 characters. */
    public static final int STRING_LENGTH = 12;
    /** The environment variable {@link #fromEnv()} reads. */
    public static final String ENV = "IDGEN_MASK_KEYS";

    private static final String ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

    private final Ff1[] keys = new Ff1[MAX_KEY_ID + 1];
    private final List<Integer> ids = new ArrayList<>();

    private MaskKeyring() {}

    /**
     * Reads a keyring: entries {@code <keyid>:<hex key>} (key id in decimal, 0..61; a key of 32,
     * 48 or 64 hex digits: AES-128, -192 or -256) separated by commas and/or newlines. Blank
     * lines, lines starting with {@code #} and whitespace around entries are ignored.
     *
     * @throws MaskException when the text is not a keyring (the message never shows a key)
     */
    public static MaskKeyring parse(String text) {
        MaskKeyring k = new MaskKeyring();
        int entry = 0;
        for (String rawLine : text.split("\n", -1)) {
            String line = rawLine.strip();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            for (String rawItem : line.split(",", -1)) {
                String item = rawItem.strip();
                if (item.isEmpty()) {
                    continue;
                }
                entry++;
                k.add(entry, item);
            }
        }
        if (k.ids.isEmpty()) {
            throw new MaskException("the keyring holds no keys");
        }
        return k;
    }

    /** Reads the keyring from the environment variable {@code IDGEN_MASK_KEYS}. */
    public static MaskKeyring fromEnv() {
        String text = System.getenv(ENV);
        if (text == null || text.isBlank()) {
            throw new MaskException(ENV + " is not set");
        }
        return parse(text);
    }

    /** Reads the keyring from a file. */
    public static MaskKeyring fromFile(Path path) throws IOException {
        return parse(Files.readString(path, StandardCharsets.UTF_8));
    }

    private void add(int entry, String item) {
        int colon = item.indexOf(':');
        if (colon < 0) {
            throw new MaskException("keyring entry " + entry + ": expected <keyid>:<hex key>");
        }
        String idText = item.substring(0, colon).strip();
        String keyText = item.substring(colon + 1).strip();
        if (idText.isEmpty() || !idText.chars().allMatch(c -> c >= '0' && c <= '9')) {
            throw new MaskException("keyring entry " + entry + ": the key id is not a decimal number");
        }
        String digits = idText.replaceFirst("^0+(?=.)", ""); // "01" is 1
        int id = digits.length() > 2 ? Integer.MAX_VALUE : Integer.parseInt(digits);
        if (id > MAX_KEY_ID) {
            throw new MaskException("keyring entry " + entry + ": key id out of range (0.." + MAX_KEY_ID + ")");
        }
        if (keys[id] != null) {
            throw new MaskException("keyring entry " + entry + ": duplicate key id " + id);
        }
        String where = "keyring entry " + entry + " (key id " + id + "): ";
        if (!keyText.chars().allMatch(c -> Character.digit(c, 16) >= 0 && c < 128)) {
            throw new MaskException(where + "the key is not hex");
        }
        int n = keyText.length();
        if (n != 32 && n != 48 && n != 64) {
            throw new MaskException(where + "a key is 32, 48 or 64 hex digits, not " + n);
        }
        byte[] key = new byte[n / 2];
        for (int i = 0; i < key.length; i++) {
            key[i] = (byte) ((Character.digit(keyText.charAt(2 * i), 16) << 4) | Character.digit(keyText.charAt(2 * i + 1), 16));
        }
        keys[id] = new Ff1(key);
        java.util.Arrays.fill(key, (byte) 0);
        ids.add(id);
    }

    /** The id of the key that masks (the keyring's first). */
    public int currentKeyId() {
        return ids.get(0);
    }

    /** The keyring's key ids, the current one first. */
    public List<Integer> keyIds() {
        return Collections.unmodifiableList(ids);
    }

    private static void checkWidth(int width) {
        if (width < MIN_WIDTH || width > MAX_WIDTH) {
            throw new MaskException("mask width " + width + " is outside " + MIN_WIDTH + ".." + MAX_WIDTH);
        }
    }

    private Ff1 key(int keyId) {
        if (keyId < 0 || keyId > MAX_KEY_ID || keys[keyId] == null) {
            String c = keyId >= 0 && keyId <= MAX_KEY_ID ? ALPHABET.charAt(keyId) + " (" + keyId + ")" : Integer.toString(keyId);
            throw new MaskException("unknown key id " + c);
        }
        return keys[keyId];
    }

    /** FF1 over the width-bit numeral string of x (most significant bit first) with tweak [keyId]. */
    private static long run(Ff1 f, int keyId, long x, int width, boolean decrypt) {
        int[] bits = new int[width];
        for (int i = 0; i < width; i++) {
            bits[i] = (int) ((x >>> (width - 1 - i)) & 1);
        }
        byte[] tweak = {(byte) keyId};
        int[] out = decrypt ? f.decrypt(tweak, bits, 2) : f.encrypt(tweak, bits, 2);
        long y = 0;
        for (int b : out) {
            y = (y << 1) | b;
        }
        return y;
    }

    /** The masked form of an ID in {@code 0 .. 2^63} under the current key. */
    public long mask(long id) {
        return mask(id, DEFAULT_WIDTH);
    }

    /**
     * The masked form of an ID below {@code 2^width} under the current key (width 20..63); the
     * result is below {@code 2^width} too.
     */
    public long mask(long id, int width) {
        checkWidth(width);
        if (id < 0 || (id >>> width) != 0) {
            throw new MaskException("ID " + Long.toUnsignedString(id) + " is not below 2^" + width);
        }
        int current = currentKeyId();
        return run(keys[current], current, id, width, false);
    }

    /** The ID a masked integer (width 63) stands for, under the current key. */
    public long unmask(long masked) {
        return unmask(masked, currentKeyId(), DEFAULT_WIDTH);
    }

    /** The ID a masked integer (width 63) stands for, under the key {@code keyId}. */
    public long unmask(long masked, int keyId) {
        return unmask(masked, keyId, DEFAULT_WIDTH);
    }

    /** The ID a masked integer stands for, under the key {@code keyId}, for a width of 20..63. */
    public long unmask(long masked, int keyId, int width) {
        checkWidth(width);
        Ff1 f = key(keyId);
        if (masked < 0 || (masked >>> width) != 0) {
            throw new MaskException("masked value " + Long.toUnsignedString(masked) + " is not below 2^" + width);
        }
        return run(f, keyId, masked, width, true);
    }

    /** The masked string form (width 63) of an ID under the current key. */
    public String maskString(long id) {
        return maskString(id, DEFAULT_WIDTH);
    }

    /**
     * The masked string form of an ID under the current key: the key id's base62 character, then
     * the masked value in 11 base62 characters, most significant first (12 in all).
     */
    public String maskString(long id, int width) {
        return maskedString(currentKeyId(), mask(id, width));
    }

    /**
     * The string form of a value already masked with key {@code keyId} (as a node's MASKED_IDS
     * answers it): the key ID's base62 character, then the value in 11 base62 characters. No key
     * is needed.
     */
    public static String maskedString(int keyId, long masked) {
        if (keyId < 0 || keyId > MAX_KEY_ID || masked < 0) {
            throw new MaskException("key ID " + keyId + " outside 0.." + MAX_KEY_ID + " or a negative masked value");
        }
        long m = masked;
        char[] out = new char[STRING_LENGTH];
        out[0] = ALPHABET.charAt(keyId);
        for (int i = STRING_LENGTH - 1; i >= 1; i--) {
            out[i] = ALPHABET.charAt((int) (m % 62)); // m >= 0
            m /= 62;
        }
        return new String(out);
    }

    /** The ID a masked string (width 63) stands for. */
    public long unmaskString(String text) {
        return unmaskString(text, DEFAULT_WIDTH);
    }

    /** The ID a masked string stands for, under the key its first character names. */
    public long unmaskString(String text, int width) {
        checkWidth(width);
        if (text.length() != STRING_LENGTH) {
            throw new MaskException("a masked string is " + STRING_LENGTH + " characters, not " + text.length());
        }
        int[] digits = new int[STRING_LENGTH];
        for (int i = 0; i < STRING_LENGTH; i++) {
            char c = text.charAt(i);
            int d = c < 128 ? ALPHABET.indexOf(c) : -1;
            if (d < 0) {
                throw new MaskException("invalid character at position " + i + " of a masked string");
            }
            digits[i] = d;
        }
        int keyId = digits[0];
        if (keys[keyId] == null) {
            throw new MaskException("unknown key id " + text.charAt(0));
        }
        long v = 0;
        for (int i = 1; i < STRING_LENGTH; i++) {
            if (Long.compareUnsigned(v, Long.divideUnsigned(-1L - digits[i], 62)) > 0) {
                throw new MaskException("masked value is not below 2^" + width);
            }
            v = v * 62 + digits[i];
        }
        if (v < 0 || (v >>> width) != 0) {
            throw new MaskException("masked value is not below 2^" + width);
        }
        return run(keys[keyId], keyId, v, width, true);
    }

    /** Names the key ids, never the keys. */
    @Override
    public String toString() {
        return "MaskKeyring(current key id " + currentKeyId() + ", key ids " + ids + ", keys hidden)";
    }
}
