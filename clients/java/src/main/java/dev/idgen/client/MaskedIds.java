package dev.idgen.client;

import java.util.Arrays;

/**
 * IDs masked by the node (protocol version 5, MASKED_IDS): the masking key's ID (0..=61) and
 * the masked values, in the order of the IDs they stand for (masked values are not in order).
 * {@link MaskKeyring#unmask(long, int)} with the same keys gives the IDs back.
 */
public record MaskedIds(int keyId, long[] masked) {
    /** The 12-character string forms: the key ID's base62 character, then 11 base62 digits. */
    public String[] strings() {
        String[] out = new String[masked.length];
        for (int i = 0; i < masked.length; i++) {
            out[i] = MaskKeyring.maskedString(keyId, masked[i]);
        }
        return out;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof MaskedIds m && m.keyId == keyId && Arrays.equals(m.masked, masked);
    }

    @Override
    public int hashCode() {
        return 31 * keyId + Arrays.hashCode(masked);
    }

    @Override
    public String toString() {
        return "MaskedIds{keyId=" + keyId + ", masked=" + Arrays.toString(masked) + "}";
    }
}
