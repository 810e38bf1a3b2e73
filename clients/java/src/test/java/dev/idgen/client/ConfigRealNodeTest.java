package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Clients built from URLs and from IDGEN_NODES-like maps (CONFIG.md) against real nodes: plain,
 * TLS and mutual TLS; settings given twice refused; expand=true (a fake resolver stands for DNS:
 * names expanded to their addresses, TLS verifying the name, re-resolution on node failure).
 */
class ConfigRealNodeTest {
    static Path certs;
    static Support.Node plain;
    static Support.Node mtls;

    @BeforeAll
    static void start() throws Exception {
        certs = Support.certs();
        plain = Support.Node.memory();
        mtls = new Support.Node(List.of("--store", "memory", "--shards", "2", "--tls-listen", "127.0.0.1:0",
                "--tls-cert", cert("server.crt"), "--tls-key", cert("server.key"), "--tls-client-ca", cert("ca.crt")));
    }

    @AfterAll
    static void stop() {
        if (plain != null) {
            plain.close();
        }
        if (mtls != null) {
            mtls.close();
        }
    }

    static String cert(String name) {
        return certs.resolve(name).toString();
    }

    static String port(String addr) {
        return addr.substring(addr.lastIndexOf(':') + 1);
    }

    static List<String> addresses(IdgenClient c) {
        List<String> out = new ArrayList<>();
        c.nodes().forEach(n -> out.add(n.address()));
        return out;
    }

    @Test
    void fromAUrlPlain() {
        try (IdgenClient c = IdgenClient.fromUrl("idgen://" + plain.addr + "/?connect_timeout_ms=3000&timeout_ms=2000")) {
            assertEquals(10, c.nextIds(10).length);
            assertEquals(List.of(plain.addr), addresses(c));
        }
        // Options in code beside the URL keep their meaning.
        try (IdgenClient c = IdgenClient.fromUrl("idgen://" + plain.addr, IdgenClient.builder().prefetch(100))) {
            c.nextId();
            assertTrue(c.stats().prefetchRefills() >= 1, "the prefetch pool from code is used");
        }
    }

    @Test
    void fromAnEnvironmentPlainList() {
        String byName = "localhost:" + port(plain.addr);
        ClientConfig cfg = ClientConfig.fromEnv(Map.of("IDGEN_NODES", " " + plain.addr + " , " + byName + " ",
                "IDGEN_CLIENT_TIMEOUT_MS", "1500"));
        assertEquals(1500L, cfg.timeoutMs());
        try (IdgenClient c = IdgenClient.builder().config(cfg).build()) {
            assertEquals(List.of(plain.addr, byName), addresses(c));
            assertEquals(100, c.nextIds(100).length);
        }
    }

    @Test
    void fromAnEnvironmentWithMutualTls() {
        ClientConfig cfg = ClientConfig.fromEnv(Map.of("IDGEN_NODES", "localhost:" + port(mtls.tlsAddr),
                "IDGEN_CLIENT_CA", cert("ca.crt"), "IDGEN_CLIENT_CERT", cert("client.crt"), "IDGEN_CLIENT_KEY",
                cert("client.key")));
        assertTrue(cfg.tls());
        try (IdgenClient c = IdgenClient.builder().config(cfg).build()) {
            assertEquals(5, c.nextIds(5).length);
        }
        // Without a client certificate the node refuses the handshake.
        ClientConfig noCert = ClientConfig.fromEnv(Map.of("IDGEN_NODES", mtls.tlsAddr, "IDGEN_CLIENT_CA", cert("ca.crt")));
        try (IdgenClient c = IdgenClient.builder().config(noCert).callDeadline(Duration.ofSeconds(5)).build()) {
            assertThrows(UnavailableException.class, () -> c.nextIds(1));
        }
    }

    /** Runs {@link EnvProbe} in a JVM whose environment holds no IDGEN_* but {@code env}. */
    static String probe(Map<String, String> env) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(java.nio.file.Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", ConnectTest.classpathOf(IdgenClient.class) + java.io.File.pathSeparator
                        + ConnectTest.classpathOf(EnvProbe.class), EnvProbe.class.getName());
        pb.environment().keySet().removeIf(k -> k.startsWith("IDGEN_"));
        pb.environment().putAll(env);
        pb.redirectErrorStream(true);
        Process p = pb.start();
        String out = Support.readAll(p.getInputStream());
        if (!p.waitFor(60, java.util.concurrent.TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("EnvProbe did not finish: " + out);
        }
        return out;
    }

    @Test
    void fromTheProcessEnvironment() throws Exception {
        String out = probe(Map.of("IDGEN_NODES", plain.addr));
        assertTrue(out.contains("ok 3 from " + plain.addr), out);
        out = probe(Map.of("IDGEN_NODES", "localhost:" + port(mtls.tlsAddr), "IDGEN_CLIENT_CA", cert("ca.crt"),
                "IDGEN_CLIENT_CERT", cert("client.crt"), "IDGEN_CLIENT_KEY", cert("client.key")));
        assertTrue(out.contains("ok 3 from localhost:" + port(mtls.tlsAddr)), out);
        out = probe(Map.of());
        assertTrue(out.contains("error: IDGEN_NODES is not set"), out);
        out = probe(Map.of("IDGEN_NODES", "idgen://" + plain.addr, "IDGEN_CLIENT_TIMEOUT_MS", "100"));
        assertTrue(out.contains("error: IDGEN_NODES is a URL, so IDGEN_CLIENT_TIMEOUT_MS must not be set"), out);
    }

    @Test
    void fromAUrlWithMutualTlsAndAServerName() {
        // Dialed by address, verified as the name server_name gives (the certificate names localhost).
        String url = "idgens://" + mtls.tlsAddr + "?ca=" + cert("ca.crt").replace("/", "%2F") + "&cert=" + cert("client.crt")
                + "&key=" + cert("client.key") + "&server_name=localhost";
        try (IdgenClient c = IdgenClient.fromUrl(url)) {
            assertEquals(5, c.nextIds(5).length);
        }
        String wrongName = "idgens://" + mtls.tlsAddr + "?ca=" + cert("ca.crt") + "&cert=" + cert("client.crt")
                + "&key=" + cert("client.key") + "&server_name=idgen.other";
        try (IdgenClient c = IdgenClient.fromUrl(wrongName, IdgenClient.builder().callDeadline(Duration.ofSeconds(5)))) {
            TlsException e = assertThrows(TlsException.class, () -> c.nextIds(1));
            assertEquals(TlsException.Kind.NAME_MISMATCH, e.kind());
        }
    }

    @Test
    void idgensWithoutCaVerifiesAgainstTheSystemRoots() {
        // The test CA is not among the JDK's roots: the node's certificate is refused.
        try (IdgenClient c = IdgenClient.fromUrl("idgens://localhost:" + port(mtls.tlsAddr) + "?connect_timeout_ms=5000")) {
            TlsException e = assertThrows(TlsException.class, () -> c.nextIds(1));
            assertEquals(TlsException.Kind.UNKNOWN_ISSUER, e.kind());
        }
    }

    @Test
    void aSettingGivenBothInCodeAndInTheUrlIsAnError() {
        String url = "idgen://" + plain.addr + "?connect_timeout_ms=500&timeout_ms=500";
        List<IdgenClient.Builder> both = List.of(
                IdgenClient.builder().nodes(plain.addr).url(url),
                IdgenClient.builder().connectTimeout(Duration.ofSeconds(1)).url(url),
                IdgenClient.builder().requestTimeout(Duration.ofSeconds(1)).url(url),
                IdgenClient.builder().tls(TlsConfig.builder().caFile(certs.resolve("ca.crt")).build()).url(url),
                IdgenClient.builder().expand(false).url("idgen://" + plain.addr + "?expand=false"));
        for (IdgenClient.Builder b : both) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, b::build);
            assertTrue(e.getMessage().contains("given both in code and in the URL"), e.getMessage());
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> IdgenClient.builder().callDeadline(Duration.ofSeconds(1))
                        .config(ClientConfig.fromEnv(Map.of("IDGEN_NODES", plain.addr, "IDGEN_CLIENT_TIMEOUT_MS", "100")))
                        .requestTimeout(Duration.ofSeconds(1)).build());
        assertTrue(e.getMessage().contains("the request timeout given both in code and in the environment"), e.getMessage());
        // A setting the URL does not give may come from code.
        try (IdgenClient c = IdgenClient.builder().connectTimeout(Duration.ofSeconds(3)).url("idgen://" + plain.addr).build()) {
            assertEquals(1, c.nextIds(1).length);
        }
        assertThrows(IllegalArgumentException.class, () -> IdgenClient.fromUrl("idgen://" + plain.addr + "?cert=/c.pem"));
    }

    /** A resolver standing for DNS: names to addresses, changeable while the client runs. */
    static final class Resolver implements java.util.function.Function<String, InetAddress[]> {
        final Map<String, List<String>> names = new ConcurrentHashMap<>();
        final List<String> asked = new CopyOnWriteArrayList<>();

        @Override
        public InetAddress[] apply(String name) {
            asked.add(name);
            List<String> ips = names.getOrDefault(name, List.of());
            InetAddress[] out = new InetAddress[ips.size()];
            for (int i = 0; i < out.length; i++) {
                try {
                    out[i] = InetAddress.getByName(ips.get(i));
                } catch (UnknownHostException e) {
                    throw new IllegalStateException(e);
                }
            }
            return out;
        }
    }

    @Test
    void expandMakesEachAddressANodeAndTlsVerifiesTheName() {
        Resolver r = new Resolver();
        r.names.put("localhost", List.of("127.0.0.1"));
        r.names.put("idgen.other", List.of("127.0.0.1"));
        r.names.put("unresolved.test", List.of());
        String tlsPort = port(mtls.tlsAddr);
        String files = "ca=" + cert("ca.crt") + "&cert=" + cert("client.crt") + "&key=" + cert("client.key");
        try (IdgenClient c = IdgenClient.builder().url("idgens://localhost:" + tlsPort + "?expand=true&" + files).resolver(r)
                .build()) {
            assertEquals(List.of("127.0.0.1:" + tlsPort), addresses(c), "the name's address is the node");
            assertEquals(5, c.nextIds(5).length, "verified as localhost while dialing 127.0.0.1");
        }
        // The certificate also names 127.0.0.1: a client that verified the address would pass.
        try (IdgenClient c = IdgenClient.builder().url("idgens://idgen.other:" + tlsPort + "?expand=true&" + files)
                .resolver(r).callDeadline(Duration.ofSeconds(5)).build()) {
            assertEquals(List.of("127.0.0.1:" + tlsPort), addresses(c));
            TlsException e = assertThrows(TlsException.class, () -> c.nextIds(1));
            assertEquals(TlsException.Kind.NAME_MISMATCH, e.kind(), "TLS verifies the name given, never the address");
        }
        // A name that resolves to nothing is a node that is down, not an error at construction;
        // IP literals stay themselves, and duplicates are removed.
        try (IdgenClient c = IdgenClient.builder().nodes("unresolved.test:7420", plain.addr, "localhost:" + port(plain.addr))
                .expand(true).resolver(r).build()) {
            assertEquals(List.of("unresolved.test:7420", plain.addr), addresses(c));
        }
    }

    @Test
    void expandReResolvesWhenANodeFails() throws Exception {
        int p = Support.freePort();
        Resolver r = new Resolver();
        r.names.put("ids.test", List.of("127.0.0.1"));
        try (Support.Node a = Support.Node.memory("--listen", "127.0.0.1:" + p, "--region-bits", "1", "--region", "0");
                Support.Node b = Support.Node.memory("--listen", "127.0.0.2:" + p, "--region-bits", "1", "--region", "1")) {
            // A node that fails while the call succeeds elsewhere has the names looked at again.
            Resolver r2 = new Resolver();
            r2.names.put("ids.test", List.of("127.0.0.3", "127.0.0.1")); // nothing listens on 127.0.0.3
            try (IdgenClient c = IdgenClient.builder().url("idgen://ids.test:" + p + "?expand=true").resolver(r2).build()) {
                assertEquals(List.of("127.0.0.3:" + p, "127.0.0.1:" + p), addresses(c));
                Thread.sleep(1100);
                r2.names.put("ids.test", List.of("127.0.0.3", "127.0.0.1", "127.0.0.2"));
                assertEquals(0, c.decode(c.nextIds(3)[0]).region(), "served by the node on 127.0.0.1 after a failover");
                for (int i = 0; i < 200 && addresses(c).size() < 3; i++) {
                    Thread.sleep(10);
                }
                assertEquals(List.of("127.0.0.3:" + p, "127.0.0.1:" + p, "127.0.0.2:" + p), addresses(c),
                        "the address that appeared was added after the failure");
            }

            List<IdgenEvent> events = new CopyOnWriteArrayList<>();
            try (IdgenClient c = IdgenClient.builder().url("idgen://ids.test:" + p + "?expand=true&timeout_ms=2000")
                    .resolver(r).listener(events::add).build()) {
                assertEquals(List.of("127.0.0.1:" + p), addresses(c));
                assertEquals(0, c.decode(c.nextIds(3)[0]).region(), "served by the node on 127.0.0.1");
                // The name now points at the other node only; the first one stops.
                r.names.put("ids.test", List.of("127.0.0.2"));
                a.kill();
                Thread.sleep(1100); // re-resolution happens at most once a second
                long[] ids = c.nextIds(3);
                assertEquals(1, c.decode(ids[0]).region(), "served by the node the name resolves to now");
                assertEquals(List.of("127.0.0.2:" + p), addresses(c), "the address gone and failed is dropped");
                assertTrue(events.stream().anyMatch(e -> e.name().equals("failover")
                        && ("127.0.0.1:" + p).equals(e.get("from")) && ("127.0.0.2:" + p).equals(e.get("to"))), events.toString());
                assertTrue(r.asked.size() >= 2, "resolved at the start and after the failure: " + r.asked);
            }
        }
    }
}
