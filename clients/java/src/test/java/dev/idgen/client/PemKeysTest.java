package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.PrivateKey;
import java.security.interfaces.ECPrivateKey;
import java.security.interfaces.RSAPrivateCrtKey;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Client keys in the encodings openssl and cert-manager write (PKCS#8, PKCS#1 RSA, SEC1 EC with
 * and without an EC PARAMETERS block or a curve in the key), each read and used for mutual TLS
 * with a real node; malformed keys refused with the file's name and what is wrong. Every key and
 * certificate is made here by openssl (on PATH).
 */
class PemKeysTest {
    static Path dir;
    static Path certs;
    static Support.Node node;

    static String openssl(String... args) {
        List<String> cmd = new ArrayList<>(List.of("openssl"));
        cmd.addAll(List.of(args));
        return Support.run(cmd);
    }

    static String f(String name) {
        return dir.resolve(name).toString();
    }

    /** The contents of the top-level OCTET STRING of a PKCS#8 key: its inner key's DER. */
    static byte[] innerKey(String pkcs8) throws Exception {
        Matcher m = Pattern.compile("(?m)^\\s*(\\d+):d=1 .*prim: OCTET STRING").matcher(openssl("asn1parse", "-in", f(pkcs8)));
        assertTrue(m.find(), "no OCTET STRING in " + pkcs8);
        openssl("asn1parse", "-in", f(pkcs8), "-strparse", m.group(1), "-noout", "-out", f(pkcs8 + ".inner.der"));
        return Files.readAllBytes(dir.resolve(pkcs8 + ".inner.der"));
    }

    static String pem(String label, byte[] der) {
        return "-----BEGIN " + label + "-----\n" + Base64.getMimeEncoder(64, new byte[] {'\n'}).encodeToString(der)
                + "\n-----END " + label + "-----\n";
    }

    static byte[] der(String file) throws Exception {
        String text = Files.readString(dir.resolve(file));
        String body = text.replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", "");
        return Base64.getDecoder().decode(body);
    }

    /** A client certificate for the key in {@code key} (PKCS#8), signed by this test's CA. */
    static void certify(String key, String cert) {
        openssl("req", "-new", "-key", f(key), "-subj", "/CN=idgen-javatest-client", "-out", f(cert + ".csr"));
        openssl("x509", "-req", "-in", f(cert + ".csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial",
                "-days", "2", "-extfile", f("client.ext"), "-out", f(cert));
    }

    @BeforeAll
    static void keys() throws Exception {
        certs = Support.certs();
        dir = Files.createTempDirectory("idgen-javatest-keys-");
        // RSA: PKCS#8 (genpkey), the same key as PKCS#1 (pkey -traditional), and genrsa's own PKCS#1.
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", f("rsa.p8.pem"));
        openssl("pkey", "-in", f("rsa.p8.pem"), "-traditional", "-out", f("rsa.p1.pem"));
        openssl("genrsa", "-traditional", "-out", f("genrsa.p1.pem"), "2048");
        openssl("pkcs8", "-topk8", "-nocrypt", "-in", f("genrsa.p1.pem"), "-out", f("genrsa.p8.pem"));
        // EC P-256 as ecparam -genkey writes it (an EC PARAMETERS block, then the SEC1 key with
        // its curve), P-384 without the block (-noout), and each as PKCS#8.
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-out", f("ec256.sec1.pem"));
        openssl("ecparam", "-name", "secp384r1", "-genkey", "-noout", "-out", f("ec384.sec1.pem"));
        openssl("pkcs8", "-topk8", "-nocrypt", "-in", f("ec256.sec1.pem"), "-out", f("ec256.p8.pem"));
        openssl("pkcs8", "-topk8", "-nocrypt", "-in", f("ec384.sec1.pem"), "-out", f("ec384.p8.pem"));
        openssl("ecparam", "-name", "secp521r1", "-genkey", "-noout", "-out", f("ec521.sec1.pem"));
        openssl("pkcs8", "-topk8", "-nocrypt", "-in", f("ec521.sec1.pem"), "-out", f("ec521.p8.pem"));
        // A SEC1 key without the curve in it (the ECPrivateKey inside openssl's PKCS#8, which
        // omits it), after an EC PARAMETERS block that names the curve.
        openssl("ecparam", "-name", "secp384r1", "-out", f("p384.params.pem"));
        openssl("ecparam", "-name", "prime256v1", "-out", f("p256.params.pem"));
        Files.writeString(dir.resolve("ec384.bare.pem"),
                Files.readString(dir.resolve("p384.params.pem")) + pem("EC PRIVATE KEY", innerKey("ec384.p8.pem")));

        // A CA of this test's own for client certificates, and a node that requires them.
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                f("ca.key"), "-out", f("ca.pem"), "-subj", "/CN=idgen-javatest-client-ca", "-days", "2");
        Files.writeString(dir.resolve("client.ext"),
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n");
        certify("rsa.p8.pem", "rsa.crt");
        certify("genrsa.p8.pem", "genrsa.crt");
        certify("ec256.p8.pem", "ec256.crt");
        certify("ec384.p8.pem", "ec384.crt");
        node = new Support.Node(List.of("--store", "memory", "--shards", "2", "--tls-listen", "127.0.0.1:0",
                "--tls-cert", certs.resolve("server.crt").toString(), "--tls-key", certs.resolve("server.key").toString(),
                "--tls-client-ca", f("ca.pem")));
    }

    @AfterAll
    static void stop() {
        if (node != null) {
            node.close();
        }
        if (dir != null) {
            Support.deleteTree(dir);
        }
    }

    static PrivateKey read(String file) throws Exception {
        return PemKeys.read(Files.readAllBytes(dir.resolve(file)), f(file));
    }

    static void sameRsa(String a, String b) throws Exception {
        RSAPrivateCrtKey x = (RSAPrivateCrtKey) read(a);
        RSAPrivateCrtKey y = (RSAPrivateCrtKey) read(b);
        assertEquals(x.getModulus(), y.getModulus());
        assertEquals(x.getPrivateExponent(), y.getPrivateExponent());
        assertEquals(x.getCrtCoefficient(), y.getCrtCoefficient());
    }

    static void sameEc(String a, String b, int fieldBits) throws Exception {
        ECPrivateKey x = (ECPrivateKey) read(a);
        ECPrivateKey y = (ECPrivateKey) read(b);
        assertEquals(x.getS(), y.getS());
        assertEquals(x.getParams().getCurve(), y.getParams().getCurve());
        assertEquals(x.getParams().getOrder(), y.getParams().getOrder());
        assertEquals(fieldBits, x.getParams().getCurve().getField().getFieldSize());
    }

    @Test
    void pkcs1AndSec1KeysReadAsTheSameKeysAsTheirPkcs8Forms() throws Exception {
        assertTrue(Files.readString(dir.resolve("rsa.p1.pem")).startsWith("-----BEGIN RSA PRIVATE KEY-----"));
        assertTrue(Files.readString(dir.resolve("ec256.sec1.pem")).startsWith("-----BEGIN EC PARAMETERS-----"));
        assertTrue(Files.readString(dir.resolve("ec384.sec1.pem")).startsWith("-----BEGIN EC PRIVATE KEY-----"));
        sameRsa("rsa.p1.pem", "rsa.p8.pem");
        sameRsa("genrsa.p1.pem", "genrsa.p8.pem");
        sameEc("ec256.sec1.pem", "ec256.p8.pem", 256);
        sameEc("ec384.sec1.pem", "ec384.p8.pem", 384);
        sameEc("ec384.bare.pem", "ec384.p8.pem", 384);
        sameEc("ec521.sec1.pem", "ec521.p8.pem", 521);
    }

    @Test
    void theWrappedPkcs8IsDerAsTheJdkWritesIt() throws Exception {
        // PrivateKeyInfo of the PKCS#1 key: version 0, {rsaEncryption, NULL}, the key unchanged;
        // the JDK encodes a key it read the same way, so the two must be equal byte for byte.
        byte[] pkcs1 = der("rsa.p1.pem");
        assertArrayEquals(read("rsa.p8.pem").getEncoded(), read("rsa.p1.pem").getEncoded());
        byte[] wrapped = PemKeys.wrap(new byte[] {0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 1, 1, 1},
                PemKeys.tlv(0x05), pkcs1);
        assertArrayEquals(der("rsa.p8.pem"), wrapped, "openssl's PKCS#8 of the same key");
        assertEquals("1.2.840.113549.1.1.1", PemKeys.dotted(new byte[] {0x2a, (byte) 0x86, 0x48, (byte) 0x86,
                (byte) 0xf7, 0x0d, 1, 1, 1}));
        assertEquals("1.3.132.0.34", PemKeys.dotted(new byte[] {0x2b, (byte) 0x81, 0x04, 0x00, 0x22}));
        // Lengths: short form below 128, then the fewest bytes of the long form.
        assertArrayEquals(new byte[] {4, 0}, PemKeys.tlv(4));
        assertEquals(2 + 127, PemKeys.tlv(4, new byte[127]).length);
        assertArrayEquals(new byte[] {4, (byte) 0x81, (byte) 0x80}, Arrays.copyOf(PemKeys.tlv(4, new byte[128]), 3));
        assertArrayEquals(new byte[] {4, (byte) 0x82, 1, 0}, Arrays.copyOf(PemKeys.tlv(4, new byte[256]), 4));
    }

    /** P-521 keys read (above), but the node's TLS does not accept P-521 signatures: not here. */
    @Test
    void mutualTlsWithAClientKeyInEachEncoding() {
        String[][] pairs = {
            {"rsa.p1.pem", "rsa.crt"}, {"rsa.p8.pem", "rsa.crt"}, {"genrsa.p1.pem", "genrsa.crt"},
            {"ec256.sec1.pem", "ec256.crt"}, {"ec256.p8.pem", "ec256.crt"},
            {"ec384.sec1.pem", "ec384.crt"}, {"ec384.bare.pem", "ec384.crt"}, {"ec384.p8.pem", "ec384.crt"},
        };
        for (String[] p : pairs) {
            TlsConfig tls = TlsConfig.builder().caFile(certs.resolve("ca.crt"))
                    .clientCertFiles(dir.resolve(p[1]), dir.resolve(p[0])).build();
            try (IdgenClient c = IdgenClient.builder().nodes(node.tlsAddr).tls(tls).connectTimeout(Duration.ofSeconds(5))
                    .callDeadline(Duration.ofSeconds(10)).build()) {
                assertEquals(10, c.nextIds(10).length, p[0]);
                assertEquals(0, c.stats().nodeFailures(), p[0]);
            }
        }
        // The node does check the certificate: the test kit's client (another CA) is refused.
        TlsConfig other = TlsConfig.builder().caFile(certs.resolve("ca.crt"))
                .clientCertFiles(certs.resolve("client.crt"), certs.resolve("client.key")).build();
        assertEquals(TlsException.Kind.CLIENT_CERTIFICATE_REJECTED, TlsTest.refused(node.tlsAddr, other));
    }

    /** Builds a TlsConfig with {@code key} as the client key and returns the refusal's message. */
    static String refused(String file, String contents) throws Exception {
        Path key = dir.resolve(file);
        Files.writeString(key, contents);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> TlsConfig.builder()
                .caFile(certs.resolve("ca.crt")).clientCertFiles(dir.resolve("rsa.crt"), key).build());
        assertTrue(e.getMessage().startsWith(key + ": "), e.getMessage());
        assertNull(e.getCause(), "our own message, not a JDK exception's");
        for (String line : contents.split("\n")) {
            if (line.length() > 16 && !line.startsWith("-----")) {
                assertFalse(e.getMessage().contains(line), "never the key's text: " + e.getMessage());
            }
        }
        return e.getMessage();
    }

    static void assertRefused(String file, String contents, String what) throws Exception {
        String message = refused(file, contents);
        assertTrue(message.contains(what), "expected \"" + what + "\" in: " + message);
    }

    @Test
    void malformedPemIsRefusedNamingTheFileAndTheFault() throws Exception {
        String rsa1 = Files.readString(dir.resolve("rsa.p1.pem"));
        String body = rsa1.substring(rsa1.indexOf('\n') + 1, rsa1.indexOf("-----END"));
        assertRefused("empty.pem", "", "holds no private key (no PEM block)");
        assertRefused("cert.pem", Files.readString(dir.resolve("rsa.crt")),
                "holds no private key (found [CERTIFICATE]): expected BEGIN PRIVATE KEY (PKCS#8), RSA PRIVATE KEY (PKCS#1)");
        assertRefused("noend.pem", rsa1.substring(0, rsa1.indexOf("-----END")), "BEGIN RSA PRIVATE KEY has no END line");
        assertRefused("mismatch.pem", rsa1.replace("END RSA PRIVATE KEY", "END EC PRIVATE KEY"),
                "BEGIN RSA PRIVATE KEY ends with another label");
        assertRefused("base64.pem", rsa1.replace(body.substring(10, 14), "!!!!"), "RSA PRIVATE KEY is not valid base64");
        assertRefused("two.pem", rsa1 + Files.readString(dir.resolve("ec384.sec1.pem")),
                "more than one private key (RSA PRIVATE KEY, EC PRIVATE KEY)");

        openssl("genrsa", "-traditional", "-aes128", "-passout", "pass:x", "-out", f("enc.p1.pem"), "1024");
        assertRefused("enc1.pem", Files.readString(dir.resolve("enc.p1.pem")), "has headers (Proc-Type)");
        openssl("pkcs8", "-topk8", "-in", f("rsa.p8.pem"), "-passout", "pass:x", "-out", f("enc.p8.pem"));
        assertRefused("enc8.pem", Files.readString(dir.resolve("enc.p8.pem")), "holds an encrypted private key");
        openssl("genpkey", "-algorithm", "X25519", "-out", f("x25519.pem"));
        assertRefused("x25519.pem2", Files.readString(dir.resolve("x25519.pem")),
                "the PKCS#8 key's algorithm 1.3.101.110 is not supported");
    }

    @Test
    void malformedDerIsRefusedNamingTheFault() throws Exception {
        byte[] rsa1 = der("rsa.p1.pem");
        byte[] sec1 = der("ec384.sec1.pem");
        byte[] bare384 = innerKey("ec384.p8.pem");
        byte[] bare256 = innerKey("ec256.p8.pem");
        String p256 = Files.readString(dir.resolve("p256.params.pem"));
        String p384 = Files.readString(dir.resolve("p384.params.pem"));

        assertRefused("short.pem", pem("RSA PRIVATE KEY", Arrays.copyOf(rsa1, rsa1.length - 10)),
                "the PKCS#1 key is truncated");
        byte[] trailing = Arrays.copyOf(rsa1, rsa1.length + 2);
        assertRefused("trailing.pem", pem("RSA PRIVATE KEY", trailing), "the PKCS#1 key has 2 bytes after its end");
        assertRefused("indefinite.pem", pem("EC PRIVATE KEY", new byte[] {0x30, (byte) 0x80, 2, 1, 1, 0, 0}),
                "the SEC1 key has an indefinite or oversized DER length");
        assertRefused("longform.pem", pem("EC PRIVATE KEY", new byte[] {0x30, (byte) 0x81, 3, 2, 1, 1}),
                "the SEC1 key has a DER length that is not minimal");
        assertRefused("nolength.pem", pem("PRIVATE KEY", new byte[] {0x30}), "the PKCS#8 key is truncated (no length)");
        assertRefused("sec1asrsa.pem", pem("RSA PRIVATE KEY", sec1), "the PKCS#1 key's version is not 0");
        assertRefused("rsaassec1.pem", pem("EC PRIVATE KEY", rsa1), "the SEC1 key's version is not 1");
        assertRefused("rsaaspkcs8.pem", pem("PRIVATE KEY", rsa1), "the PKCS#8 key's algorithm has the wrong DER tag (0x2");
        byte[] fewer = PemKeys.tlv(0x30, PemKeys.tlv(2, new byte[] {0}), PemKeys.tlv(2, new byte[] {5}));
        assertRefused("fewer.pem", pem("RSA PRIVATE KEY", fewer), "the PKCS#1 key has 2 integers, not 9");
        assertRefused("badrsa.pem", pem("RSA PRIVATE KEY", PemKeys.tlv(0x30, PemKeys.tlv(2, new byte[] {0}),
                PemKeys.tlv(2), PemKeys.tlv(2), PemKeys.tlv(2), PemKeys.tlv(2), PemKeys.tlv(2), PemKeys.tlv(2),
                PemKeys.tlv(2), PemKeys.tlv(2))), "the PKCS#1 RSA key is malformed or unsupported");

        assertRefused("nocurve.pem", pem("EC PRIVATE KEY", bare384), "the SEC1 key names no curve");
        assertRefused("othercurve.pem", p256 + Files.readString(dir.resolve("ec384.sec1.pem")),
                "the SEC1 key is on another curve than its EC PARAMETERS block names");
        assertRefused("wrongsize.pem", p384 + pem("EC PRIVATE KEY", bare256),
                "the SEC1 key's private key is 32 bytes, not 48 as on P-384");
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-param_enc", "explicit", "-out", f("explicit.pem"));
        assertRefused("explicit.pem2", Files.readString(dir.resolve("explicit.pem")),
                "are explicit curve parameters: use a named curve");
        openssl("ecparam", "-name", "secp256k1", "-genkey", "-noout", "-out", f("k1.pem"));
        assertRefused("k1.pem2", Files.readString(dir.resolve("k1.pem")),
                "the SEC1 key is on curve 1.3.132.0.10: supported are P-256, P-384 and P-521");
        assertEquals(0x81, sec1[1] & 0xff, "P-384's SEC1 key has a one-byte long-form length (sliced below)");
        byte[] extra = PemKeys.tlv(0x30, Arrays.copyOfRange(sec1, 3, sec1.length), PemKeys.tlv(0xa2));
        assertRefused("extra.pem", pem("EC PRIVATE KEY", extra), "the SEC1 key has a field after its public key");
    }

    @Test
    void aKeyOfTheTestKitStillReads() throws Exception {
        PrivateKey k = PemKeys.read(Files.readAllBytes(certs.resolve("client.key")), "client.key");
        assertEquals("EC", k.getAlgorithm());
        assertTrue(new String(Files.readAllBytes(certs.resolve("client.key")), StandardCharsets.US_ASCII)
                .startsWith("-----BEGIN PRIVATE KEY-----"));
    }
}
