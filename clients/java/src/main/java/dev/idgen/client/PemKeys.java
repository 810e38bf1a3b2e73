package dev.idgen.client;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;

/**
 * Reads an unencrypted PEM private key in the three encodings tools write: PKCS#8 ({@code BEGIN
 * PRIVATE KEY}: RSA, RSASSA-PSS, EC, Ed25519, Ed448), PKCS#1 ({@code BEGIN RSA PRIVATE KEY},
 * cert-manager's default for RSA) and SEC1 ({@code BEGIN EC PRIVATE KEY}, cert-manager's and
 * {@code openssl ecparam -genkey}'s, with or without an {@code EC PARAMETERS} block).
 *
 * <p>The JDK reads only PKCS#8, so a PKCS#1 or SEC1 key is put, byte for byte, into a PKCS#8
 * PrivateKeyInfo (RFC 5208: version 0, an AlgorithmIdentifier, the key as an OCTET STRING) whose
 * AlgorithmIdentifier says what the key is: {@code rsaEncryption} with NULL parameters (RFC 8017
 * A.1), or {@code id-ecPublicKey} with the key's named curve (RFC 5480 2.1.1, RFC 5915 3). Before
 * that the DER is checked: definite minimal lengths, nothing after the outer structure, the
 * version and field order each format fixes. What is wrong is said with the file's name, never
 * the key's bytes.
 */
final class PemKeys {
    private PemKeys() {}

    private static final byte[] RSA = {0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01, 0x01, 0x01};
    private static final byte[] RSA_PSS = {0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01, 0x01, 0x0a};
    private static final byte[] EC = {0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01};
    private static final byte[] ED25519 = {0x2b, 0x65, 0x70};
    private static final byte[] ED448 = {0x2b, 0x65, 0x71};

    /** The named curves a SEC1 key may be on: OID, name, length of the private key octets. */
    private record Curve(byte[] oid, String name, int keyBytes) {}

    private static final List<Curve> CURVES = List.of(
            new Curve(new byte[] {0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x03, 0x01, 0x07}, "P-256", 32),
            new Curve(new byte[] {0x2b, (byte) 0x81, 0x04, 0x00, 0x22}, "P-384", 48),
            new Curve(new byte[] {0x2b, (byte) 0x81, 0x04, 0x00, 0x23}, "P-521", 66));

    private static final int INTEGER = 0x02, BIT_STRING = 0x03, OCTET_STRING = 0x04, NULL = 0x05, OID = 0x06,
            SEQUENCE = 0x30, CONTEXT_0 = 0xa0, CONTEXT_1 = 0xa1;

    /** What is wrong with a key; {@link #read} adds the file's name. */
    private static final class BadKey extends Exception {
        private static final long serialVersionUID = 1L;

        BadKey(String what) {
            super(what, null, false, false);
        }
    }

    /**
     * The private key in {@code pem}.
     *
     * @param name the file's name, for messages
     * @throws IllegalArgumentException naming {@code name} and what is wrong
     */
    static PrivateKey read(byte[] pem, String name) {
        try {
            return read(blocks(new String(pem, StandardCharsets.US_ASCII)));
        } catch (BadKey e) {
            throw new IllegalArgumentException(name + ": " + e.getMessage());
        }
    }

    private record Block(String label, byte[] der) {}

    private static PrivateKey read(List<Block> blocks) throws BadKey {
        Block key = null;
        Block params = null;
        List<String> labels = new ArrayList<>();
        for (Block b : blocks) {
            labels.add(b.label);
            switch (b.label) {
                case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY" -> {
                    if (key != null) {
                        throw new BadKey("holds more than one private key (" + key.label + ", " + b.label + ")");
                    }
                    key = b;
                }
                case "EC PARAMETERS" -> params = b;
                case "ENCRYPTED PRIVATE KEY" -> throw new BadKey(
                        "holds an encrypted private key: give it unencrypted (openssl pkey -in KEY -out PLAIN)");
                default -> { } // a certificate beside the key, for example
            }
        }
        if (key == null) {
            throw new BadKey("holds no private key" + (labels.isEmpty() ? " (no PEM block)" : " (found " + labels + ")")
                    + ": expected BEGIN PRIVATE KEY (PKCS#8), RSA PRIVATE KEY (PKCS#1) or EC PRIVATE KEY (SEC1)");
        }
        return switch (key.label) {
            case "RSA PRIVATE KEY" -> generate("RSA", "PKCS#1 RSA", wrap(RSA, tlv(NULL), pkcs1(key.der)));
            case "EC PRIVATE KEY" -> {
                byte[] sec1 = key.der;
                Curve curve = sec1(sec1, params == null ? null : curveOid(params.der, "the EC PARAMETERS block"));
                yield generate("EC", "SEC1 EC " + curve.name, wrap(EC, tlv(OID, curve.oid), sec1));
            }
            default -> pkcs8(key.der);
        };
    }

    /** The PEM blocks of {@code text}, decoded; text outside blocks is ignored, as OpenSSL does. */
    private static List<Block> blocks(String text) throws BadKey {
        List<Block> out = new ArrayList<>();
        String label = null;
        StringBuilder body = new StringBuilder();
        for (String raw : text.split("\n", -1)) {
            String line = raw.strip();
            if (label == null) {
                if (line.startsWith("-----BEGIN ") && line.endsWith("-----") && line.length() > 16) {
                    label = line.substring(11, line.length() - 5);
                    body.setLength(0);
                }
            } else if (line.startsWith("-----END ")) {
                if (!line.equals("-----END " + label + "-----")) {
                    throw new BadKey("the PEM block BEGIN " + label + " ends with another label");
                }
                byte[] der;
                try {
                    der = Base64.getDecoder().decode(body.toString());
                } catch (IllegalArgumentException e) {
                    throw new BadKey("the PEM block " + label + " is not valid base64");
                }
                out.add(new Block(label, der));
                label = null;
            } else if (line.contains(":")) {
                // RFC 1421 headers: OpenSSL writes them only for an encrypted key.
                throw new BadKey("the PEM block " + label + " has headers (" + line.substring(0, line.indexOf(':'))
                        + "): an encrypted key? give it unencrypted (openssl pkey -in KEY -out PLAIN)");
            } else {
                body.append(line);
            }
        }
        if (label != null) {
            throw new BadKey("the PEM block BEGIN " + label + " has no END line");
        }
        return out;
    }

    /**
     * Checks a PKCS#1 RSAPrivateKey's frame (RFC 8017 A.1.2: SEQUENCE { version 0, then eight
     * INTEGERs: n, e, d, p, q, d mod (p-1), d mod (q-1), q^-1 mod p }); the JDK checks their values.
     */
    private static byte[] pkcs1(byte[] der) throws BadKey {
        Der seq = Der.whole(der, SEQUENCE, "the PKCS#1 key");
        byte[] version = seq.next(INTEGER, "the PKCS#1 key's version");
        if (version.length != 1 || version[0] != 0) {
            throw new BadKey("the PKCS#1 key's version is not 0 (multi-prime keys are not supported)");
        }
        int integers = 1;
        while (seq.more()) {
            seq.next(INTEGER, "the PKCS#1 key's integers");
            integers++;
        }
        if (integers != 9) {
            throw new BadKey("the PKCS#1 key has " + integers + " integers, not 9");
        }
        return der;
    }

    /**
     * Checks a SEC1 ECPrivateKey (RFC 5915 3: SEQUENCE { version 1, privateKey OCTET STRING,
     * [0] parameters OPTIONAL, [1] publicKey OPTIONAL }) and returns its curve: the one named in
     * [0], else {@code fromBlock} (an EC PARAMETERS block's), which must agree when both are given.
     */
    private static Curve sec1(byte[] der, byte[] fromBlock) throws BadKey {
        Der seq = Der.whole(der, SEQUENCE, "the SEC1 key");
        byte[] version = seq.next(INTEGER, "the SEC1 key's version");
        if (version.length != 1 || version[0] != 1) {
            throw new BadKey("the SEC1 key's version is not 1");
        }
        int keyBytes = seq.next(OCTET_STRING, "the SEC1 key's private key").length;
        byte[] oid = null;
        if (seq.peek() == CONTEXT_0) {
            oid = curveOid(seq.next(CONTEXT_0, "the SEC1 key's parameters"), "the SEC1 key's parameters");
        }
        if (seq.peek() == CONTEXT_1) {
            Der.whole(seq.next(CONTEXT_1, "the SEC1 key's public key"), BIT_STRING, "the SEC1 key's public key");
        }
        if (seq.more()) {
            throw new BadKey("the SEC1 key has a field after its public key");
        }
        if (oid == null) {
            oid = fromBlock;
        } else if (fromBlock != null && !Arrays.equals(oid, fromBlock)) {
            throw new BadKey("the SEC1 key is on another curve than its EC PARAMETERS block names");
        }
        if (oid == null) {
            throw new BadKey("the SEC1 key names no curve (no parameters in the key, no EC PARAMETERS block)");
        }
        for (Curve c : CURVES) {
            if (Arrays.equals(c.oid, oid)) {
                if (keyBytes != c.keyBytes) {
                    throw new BadKey("the SEC1 key's private key is " + keyBytes + " bytes, not " + c.keyBytes
                            + " as on " + c.name);
                }
                return c;
            }
        }
        throw new BadKey("the SEC1 key is on curve " + dotted(oid) + ": supported are P-256, P-384 and P-521");
    }

    /** The OID of a named curve: ECParameters (RFC 5480 2.1.1) that are a namedCurve. */
    private static byte[] curveOid(byte[] der, String what) throws BadKey {
        if (der.length > 0 && (der[0] & 0xff) == SEQUENCE) {
            throw new BadKey(what + " are explicit curve parameters: use a named curve"
                    + " (openssl ec -in KEY -param_enc named_curve)");
        }
        Der d = Der.whole(der, OID, what);
        return d.rest();
    }

    /** A PKCS#8 PrivateKeyInfo: the KeyFactory of its AlgorithmIdentifier's algorithm. */
    private static PrivateKey pkcs8(byte[] der) throws BadKey {
        Der seq = Der.whole(der, SEQUENCE, "the PKCS#8 key");
        byte[] version = seq.next(INTEGER, "the PKCS#8 key's version");
        if (version.length != 1 || version[0] > 1 || version[0] < 0) {
            throw new BadKey("the PKCS#8 key's version is not 0 or 1");
        }
        Der alg = new Der(seq.next(SEQUENCE, "the PKCS#8 key's algorithm"));
        byte[] oid = alg.next(OID, "the PKCS#8 key's algorithm");
        seq.next(OCTET_STRING, "the PKCS#8 key's private key");
        String algorithm = Arrays.equals(oid, RSA) ? "RSA"
                : Arrays.equals(oid, RSA_PSS) ? "RSASSA-PSS"
                : Arrays.equals(oid, EC) ? "EC"
                : Arrays.equals(oid, ED25519) ? "Ed25519"
                : Arrays.equals(oid, ED448) ? "Ed448"
                : null;
        if (algorithm == null) {
            throw new BadKey("the PKCS#8 key's algorithm " + dotted(oid)
                    + " is not supported (RSA, RSASSA-PSS, EC, Ed25519, Ed448)");
        }
        return generate(algorithm, "PKCS#8 " + algorithm, der);
    }

    private static PrivateKey generate(String algorithm, String what, byte[] pkcs8) throws BadKey {
        try {
            return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(pkcs8));
        } catch (GeneralSecurityException e) {
            throw new BadKey("the " + what + " key is malformed or unsupported (" + e.getMessage() + ")");
        }
    }

    /** PrivateKeyInfo ::= SEQUENCE { version 0, AlgorithmIdentifier { oid, params }, privateKey OCTET STRING }. */
    static byte[] wrap(byte[] algorithmOid, byte[] params, byte[] key) {
        return tlv(SEQUENCE, tlv(INTEGER, new byte[] {0}), tlv(SEQUENCE, tlv(OID, algorithmOid), params),
                tlv(OCTET_STRING, key));
    }

    /** One DER tag-length-value with the contents {@code parts} joined. */
    static byte[] tlv(int tag, byte[]... parts) {
        ByteArrayOutputStream body = new ByteArrayOutputStream();
        for (byte[] p : parts) {
            body.writeBytes(p);
        }
        int n = body.size();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(tag);
        if (n < 0x80) {
            out.write(n);
        } else {
            int bytes = n < 0x100 ? 1 : n < 0x10000 ? 2 : n < 0x1000000 ? 3 : 4;
            out.write(0x80 | bytes);
            for (int i = bytes - 1; i >= 0; i--) {
                out.write(n >>> (8 * i));
            }
        }
        out.writeBytes(body.toByteArray());
        return out.toByteArray();
    }

    /** An OID's contents in dotted form, for messages. */
    static String dotted(byte[] oid) {
        StringBuilder s = new StringBuilder();
        long v = 0;
        for (int i = 0; i < oid.length; i++) {
            v = (v << 7) | (oid[i] & 0x7f);
            if ((oid[i] & 0x80) != 0) {
                if (v > (Long.MAX_VALUE >>> 7)) {
                    return "(an OID too long to show)";
                }
                continue;
            }
            if (s.length() == 0) {
                int first = v < 40 ? 0 : v < 80 ? 1 : 2;
                s.append(first).append('.').append(v - 40L * first);
            } else {
                s.append('.').append(v);
            }
            v = 0;
        }
        return s.toString();
    }

    /** A reader over a run of DER TLVs: low tag numbers, definite minimal lengths, within bounds. */
    static final class Der {
        private final byte[] b;
        private int pos;

        Der(byte[] contents) {
            this.b = contents;
        }

        /** A reader of the contents of {@code der}, which must be exactly one TLV of {@code tag}. */
        static Der whole(byte[] der, int tag, String what) throws BadKey {
            Der outer = new Der(der);
            byte[] contents = outer.next(tag, what);
            if (outer.more()) {
                throw new BadKey(what + " has " + (der.length - outer.pos) + " bytes after its end");
            }
            return new Der(contents);
        }

        boolean more() {
            return pos < b.length;
        }

        /** The next tag, or -1 at the end. */
        int peek() {
            return more() ? b[pos] & 0xff : -1;
        }

        /** The rest of the contents. */
        byte[] rest() {
            byte[] r = Arrays.copyOfRange(b, pos, b.length);
            pos = b.length;
            return r;
        }

        /** The contents of the next TLV, which must have {@code tag}. */
        byte[] next(int tag, String what) throws BadKey {
            if (!more()) {
                throw new BadKey(what + " is missing (the DER ends early)");
            }
            int t = b[pos] & 0xff;
            if (t != tag) {
                throw new BadKey(what + " has the wrong DER tag (0x" + Integer.toHexString(t)
                        + ", expected 0x" + Integer.toHexString(tag) + ")");
            }
            if (pos + 1 >= b.length) {
                throw new BadKey(what + " is truncated (no length)");
            }
            int first = b[pos + 1] & 0xff;
            int at = pos + 2;
            long len;
            if (first < 0x80) {
                len = first;
            } else {
                int bytes = first & 0x7f;
                if (bytes == 0 || bytes > 4) {
                    throw new BadKey(what + " has an indefinite or oversized DER length");
                }
                if (at + bytes > b.length) {
                    throw new BadKey(what + " is truncated (in its length)");
                }
                len = 0;
                for (int i = 0; i < bytes; i++) {
                    len = (len << 8) | (b[at + i] & 0xff);
                }
                if (len < 0x80 || (b[at] & 0xff) == 0) {
                    throw new BadKey(what + " has a DER length that is not minimal");
                }
                at += bytes;
            }
            if (len > b.length - at) {
                throw new BadKey(what + " is truncated (" + len + " bytes announced, " + (b.length - at) + " there)");
            }
            pos = at + (int) len;
            return Arrays.copyOfRange(b, at, pos);
        }
    }
}
