package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * clients/vectors/connect.json: a node listening on one loopback address only is reached
 * through a name that resolves to both (::1 first, then 127.0.0.1), in plaintext and over TLS
 * verified for that name. The nodes run here; the client runs in {@link ConnectProbe}, in a
 * mount namespace with a default Debian /etc/hosts (clients/with-debian-hosts.sh).
 */
class ConnectTest {
    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> cases() throws Exception {
        return (List<Map<String, Object>>) ((Map<String, Object>) Support.json("clients/vectors/connect.json")).get("cases");
    }

    static String port(String addr) {
        return addr.substring(addr.lastIndexOf(':') + 1);
    }

    static String classpathOf(Class<?> c) throws Exception {
        return new File(c.getProtectionDomain().getCodeSource().getLocation().toURI()).getPath();
    }

    @Test
    void aNameThatResolvesToSeveralAddressesReachesTheNodeOnAnyOfThem() throws Exception {
        Path certs = Support.certs();
        List<Support.Node> nodes = new ArrayList<>();
        try {
            List<String> cmd = new ArrayList<>(List.of("bash", Support.repo().resolve("clients/with-debian-hosts.sh").toString(),
                    Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-cp", classpathOf(IdgenClient.class) + File.pathSeparator + classpathOf(ConnectProbe.class),
                    ConnectProbe.class.getName(), certs.resolve("ca.crt").toString()));
            for (Map<String, Object> c : cases()) {
                String ip = (String) c.get("listen");
                String bind = (ip.contains(":") ? "[" + ip + "]" : ip) + ":0";
                Support.Node n = new Support.Node(List.of("--store", "memory", "--shards", "1", "--listen", bind,
                        "--tls-listen", bind, "--tls-cert", certs.resolve("server.crt").toString(),
                        "--tls-key", certs.resolve("server.key").toString()));
                nodes.add(n);
                String dial = (String) c.get("dial");
                cmd.add("plain=" + dial + ":" + port(n.addr));
                cmd.add("tls=" + dial + ":" + port(n.tlsAddr));
            }
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            p.getOutputStream().close();
            if (!p.waitFor(60, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                fail("the probe did not finish within 60 s");
            }
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertEquals(0, p.exitValue(), "probe failed:\n" + out);
            assertTrue(out.contains("connected: " + 2 * cases().size()), out);
        } finally {
            for (Support.Node n : nodes) {
                n.close();
            }
        }
    }

    /**
     * A loopback address where a TCP connect gets no answer at all: a listener whose accept
     * queue is full, so that the kernel drops further SYNs.
     */
    static final class Silent implements AutoCloseable {
        final ServerSocket listener;
        final List<Socket> held = new ArrayList<>();

        Silent() throws Exception {
            listener = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
            for (int i = 0; i < 16; i++) {
                Socket s = new Socket();
                try {
                    s.connect(listener.getLocalSocketAddress(), 200);
                    held.add(s);
                } catch (SocketTimeoutException e) {
                    s.close();
                    return;
                }
            }
            close();
            fail("a listener with a full accept queue still accepted 16 connects");
        }

        InetSocketAddress addr() {
            return (InetSocketAddress) listener.getLocalSocketAddress();
        }

        @Override
        public void close() throws Exception {
            for (Socket s : held) {
                s.close();
            }
            listener.close();
        }
    }

    static long deadlineIn(long ms) {
        return System.nanoTime() + ms * 1_000_000L;
    }

    /** An address that does not answer gets only its share of the connect timeout. */
    @Test
    void aSilentFirstAddressLeavesTimeForTheNext() throws Exception {
        try (Silent silent = new Silent(); ServerSocket live = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            long start = System.nanoTime();
            try (Socket s = Connection.connectAny("n", new InetSocketAddress[] {silent.addr(),
                    (InetSocketAddress) live.getLocalSocketAddress()}, deadlineIn(1000), 1000)) {
                assertEquals(live.getLocalPort(), s.getPort());
            }
            long ms = (System.nanoTime() - start) / 1_000_000L;
            assertTrue(ms < 900, "the silent address took " + ms + " ms of 1000");
        }
    }

    @Test
    void silentAddressesFailWithinOneConnectTimeout() throws Exception {
        try (Silent a = new Silent(); Silent b = new Silent(); Silent c = new Silent()) {
            long start = System.nanoTime();
            UnavailableException e = assertThrows(UnavailableException.class, () -> Connection.connectAny("n",
                    new InetSocketAddress[] {a.addr(), b.addr(), c.addr()}, deadlineIn(600), 600));
            long ms = (System.nanoTime() - start) / 1_000_000L;
            assertTrue(ms < 1200, "each attempt had the whole timeout: " + ms + " ms");
            assertTrue(e.getMessage().contains("timed out"), e.getMessage());
        }
    }
}
