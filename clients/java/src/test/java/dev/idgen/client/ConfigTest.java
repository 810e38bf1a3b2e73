package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Every case of clients/vectors/config.json (CONFIG.md): URLs and environments, parse only. */
class ConfigTest {
    @SuppressWarnings("unchecked")
    static Map<String, Object> vectors() throws Exception {
        return (Map<String, Object>) Support.json("clients/vectors/config.json");
    }

    static void check(Map<String, Object> want, ClientConfig got, String name) {
        assertEquals(want.get("nodes"), got.nodes(), name);
        assertEquals(want.get("tls"), got.tls(), name);
        assertEquals(want.get("ca"), got.ca(), name);
        assertEquals(want.get("cert"), got.cert(), name);
        assertEquals(want.get("key"), got.key(), name);
        assertEquals(want.get("server_name"), got.serverName(), name);
        assertEquals(want.get("connect_timeout_ms"), got.connectTimeoutMs(), name);
        assertEquals(want.get("timeout_ms"), got.timeoutMs(), name);
        assertEquals(want.get("expand"), got.expand(), name);
    }

    @Test
    @SuppressWarnings("unchecked")
    void everyUrlCase() throws Exception {
        List<Map<String, Object>> cases = (List<Map<String, Object>>) vectors().get("urls");
        int ok = 0;
        int refused = 0;
        for (Map<String, Object> c : cases) {
            String url = (String) c.get("url");
            if (c.containsKey("error")) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ClientConfig.parseUrl(url),
                        url + " (" + c.get("error") + ")");
                assertTrue(e.getMessage().startsWith("bad idgen URL " + url + ": "), e.getMessage());
                assertTrue(e.getMessage().length() > ("bad idgen URL " + url + ": ").length() + 5, e.getMessage());
                refused++;
            } else {
                check(c, ClientConfig.parseUrl(url), url);
                ok++;
            }
        }
        assertTrue(ok >= 14 && refused >= 25, ok + " parsed, " + refused + " refused");
        assertEquals(cases.size(), ok + refused);
    }

    @Test
    @SuppressWarnings("unchecked")
    void everyEnvCase() throws Exception {
        List<Map<String, Object>> cases = (List<Map<String, Object>>) vectors().get("envs");
        int ok = 0;
        int refused = 0;
        for (Map<String, Object> c : cases) {
            Map<String, String> env = new HashMap<>();
            ((Map<String, Object>) c.get("env")).forEach((k, v) -> env.put(k, (String) v));
            String name = env.toString();
            if (c.containsKey("error")) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ClientConfig.fromEnv(env),
                        name + " (" + c.get("error") + ")");
                assertTrue(e.getMessage().contains("IDGEN_"), name + ": the message names the variable: " + e.getMessage());
                refused++;
            } else {
                check(c, ClientConfig.fromEnv(env), name);
                ok++;
            }
        }
        assertTrue(ok >= 9 && refused >= 9, ok + " parsed, " + refused + " refused");
        assertEquals(cases.size(), ok + refused);
    }

    @Test
    void messagesSayWhatIsWrong() {
        Map<String, String> cases = Map.of(
                "http://h:7420", "is not idgen:// or idgens://",
                "IDGEN://h", "lower case",
                "idgen://h:7420?ca=/ca.pem", "use idgens://",
                "idgens://h?cert=/c.pem", "cert without key",
                "idgen://h:7420,h:7420", "listed twice",
                "idgen://h:7420?timeout_ms=0", "1 ..= 3600000",
                "idgen://u@h", "user info",
                "idgen://h?tls=1", "unknown parameter tls");
        cases.forEach((url, says) -> {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ClientConfig.parseUrl(url));
            assertTrue(e.getMessage().contains(says), url + ": " + e.getMessage());
        });
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ClientConfig.fromEnv(Map.of()));
        assertTrue(e.getMessage().contains("IDGEN_NODES is not set"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> ClientConfig.fromEnv(Map.of("IDGEN_NODES", "idgen://a", "IDGEN_CLIENT_TIMEOUT_MS", "5")));
        assertTrue(e.getMessage().contains("IDGEN_CLIENT_TIMEOUT_MS"), e.getMessage());
    }

    @Test
    void aPlainConfigMakesNoTlsAndTlsWithoutCaUsesTheSystemRoots() {
        assertNull(ClientConfig.parseUrl("idgen://h").tlsConfig());
        TlsConfig t = ClientConfig.parseUrl("idgens://h?server_name=idgen.internal").tlsConfig();
        assertEquals("idgen.internal", t.serverName());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ClientConfig.parseUrl("idgens://h?ca=/nonexistent/ca.pem").tlsConfig());
        assertTrue(e.getMessage().contains("/nonexistent/ca.pem"), e.getMessage());
    }
}
