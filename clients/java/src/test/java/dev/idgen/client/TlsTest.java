package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.time.Duration;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** TLS and mutual TLS against real nodes' TLS listeners, with the test kit's certificates. */
class TlsTest {
    static Path certs;
    static Support.Node tlsNode;
    static Support.Node mtlsNode;

    @BeforeAll
    static void start() throws Exception {
        certs = Support.certs();
        tlsNode = new Support.Node(List.of("--store", "memory", "--shards", "2", "--tls-listen", "127.0.0.1:0",
                "--tls-cert", certs.resolve("server.crt").toString(), "--tls-key", certs.resolve("server.key").toString()));
        mtlsNode = new Support.Node(List.of("--store", "memory", "--shards", "2", "--tls-listen", "127.0.0.1:0",
                "--tls-cert", certs.resolve("server.crt").toString(), "--tls-key", certs.resolve("server.key").toString(),
                "--tls-client-ca", certs.resolve("ca.crt").toString()));
    }

    @AfterAll
    static void stop() {
        if (tlsNode != null) {
            tlsNode.close();
        }
        if (mtlsNode != null) {
            mtlsNode.close();
        }
    }

    static TlsConfig.Builder trust(String ca) {
        return TlsConfig.builder().caFile(certs.resolve(ca));
    }

    static TlsConfig client(String name) {
        return trust("ca.crt").clientCertFiles(certs.resolve(name + ".crt"), certs.resolve(name + ".key")).build();
    }

    static String byName(String addr) {
        return "localhost:" + addr.substring(addr.lastIndexOf(':') + 1);
    }

    static TlsException.Kind refused(String addr, TlsConfig tls) {
        try (IdgenClient c = IdgenClient.builder().nodes(addr).tls(tls).connectTimeout(Duration.ofSeconds(5))
                .callDeadline(Duration.ofSeconds(10)).build()) {
            TlsException e = assertThrows(TlsException.class, () -> c.nextIds(1));
            assertEquals(1, c.stats().nodeFailures(), "a failed handshake marks the node down");
            return e.kind();
        }
    }

    @Test
    void idsOverTlsByAddressAndByNameWithAlpn() {
        for (String addr : new String[] {tlsNode.tlsAddr, byName(tlsNode.tlsAddr)}) {
            try (IdgenClient c = IdgenClient.builder().nodes(addr).tls(trust("ca.crt").build()).build()) {
                long[] ids = c.nextIds(5000);
                assertEquals(5000, ids.length);
                assertEquals(5, c.nodes().get(0).hello().version());
                assertTrue(c.ping().toMillis() < 1000);
            }
        }
    }

    @Test
    void alpnIdgen1IsNegotiated() {
        Connection conn = Connection.open("n", "127.0.0.1", Integer.parseInt(tlsNode.tlsAddr.split(":")[1]),
                trust("ca.crt").build(), 5000, true, new Stats());
        try {
            assertEquals("idgen/1", conn.alpn);
            assertTrue(conn.tlsProtocol.equals("TLSv1.3") || conn.tlsProtocol.equals("TLSv1.2"), conn.tlsProtocol);
        } finally {
            conn.close();
        }
    }

    @Test
    void mutualTlsWithTheClientCertificateAndPrefetch() throws Exception {
        try (IdgenClient c = IdgenClient.builder().nodes(mtlsNode.tlsAddr).tls(client("client")).prefetch(100).build()) {
            Set<Long> seen = new HashSet<>();
            for (int i = 0; i < 500; i++) {
                assertTrue(seen.add(c.nextId()));
            }
        }
    }

    @Test
    void thePlaintextListenerServesBesideTheTlsOne() {
        try (IdgenClient c = IdgenClient.create(tlsNode.addr)) {
            assertEquals(3, c.nextIds(3).length);
        }
    }

    @Test
    void missingForeignAndExpiredClientCertificatesAreRefused() {
        assertEquals(TlsException.Kind.CLIENT_CERTIFICATE_REJECTED, refused(mtlsNode.tlsAddr, trust("ca.crt").build()));
        assertEquals(TlsException.Kind.CLIENT_CERTIFICATE_REJECTED, refused(mtlsNode.tlsAddr, client("client-other-ca")));
        assertEquals(TlsException.Kind.CLIENT_CERTIFICATE_REJECTED, refused(mtlsNode.tlsAddr, client("client-expired")));
    }

    @Test
    void aWrongNameAWrongAuthorityAndAPlaintextPortAreRefusedByTheClient() {
        assertEquals(TlsException.Kind.NAME_MISMATCH,
                refused(tlsNode.tlsAddr, trust("ca.crt").serverName("other.example").build()));
        assertEquals(TlsException.Kind.UNKNOWN_ISSUER, refused(tlsNode.tlsAddr, trust("other-ca.crt").build()));
        TlsException.Kind plain = refused(tlsNode.addr, trust("ca.crt").build());
        assertEquals(TlsException.Kind.HANDSHAKE, plain);
    }

    @Test
    void aFailedHandshakeFailsOverToTheNextNode() {
        try (IdgenClient c = IdgenClient.builder().nodes(tlsNode.addr, tlsNode.tlsAddr).tls(trust("ca.crt").build()).build()) {
            assertEquals(10, c.nextIds(10).length);
            assertTrue(c.nodes().get(0).lastError() instanceof TlsException);
            assertEquals(1, c.stats().failovers());
        }
    }

    @Test
    void badTlsFilesAreClearErrorsWithoutTheKey() throws Exception {
        Path dir = Files.createTempDirectory("idgen-javatest-tls-");
        try {
            Path junk = dir.resolve("junk.pem");
            Files.writeString(junk, "-----BEGIN PRIVATE KEY-----\nnot base64 at all!\n-----END PRIVATE KEY-----\n");
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> TlsConfig.builder()
                    .caFile(certs.resolve("ca.crt")).clientCertFiles(certs.resolve("client.crt"), junk).build());
            assertTrue(e.getMessage().contains(junk.toString()), e.getMessage());
            assertTrue(!e.getMessage().contains("not base64"), "never the key's text");
            assertThrows(IllegalArgumentException.class, () -> TlsConfig.builder().caFile(dir.resolve("missing.crt")).build());
            assertThrows(IllegalArgumentException.class, () -> TlsConfig.builder().caFile(junk).build());
            assertThrows(IllegalArgumentException.class, () -> TlsConfig.builder().build());
        } finally {
            Support.deleteTree(dir);
        }
    }
}
