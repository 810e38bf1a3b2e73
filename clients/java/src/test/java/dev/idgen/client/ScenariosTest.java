package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The shared behaviour scenarios (clients/vectors/scenarios.json, SCENARIOS.md), one test each:
 * the scenario's fake nodes served by {@code $IDGEN_FAKE_NODES_BIN}, a client given those nodes
 * in order with the scenario's timeouts (every other setting the default), its steps, and what
 * each node saw afterwards ({@code check}). Fails, never skips, when the binary is missing.
 */
class ScenariosTest {
    static final String FILE = "clients/vectors/scenarios.json";
    static final Duration LIMIT = Duration.ofSeconds(20);

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> all() throws IOException {
        Map<String, Object> doc = (Map<String, Object>) Support.json(FILE);
        return (List<Map<String, Object>>) doc.get("scenarios");
    }

    static List<String> names() throws IOException {
        List<String> names = new ArrayList<>();
        for (Map<String, Object> s : all()) {
            names.add((String) s.get("name"));
        }
        assertTrue(names.size() >= 15, "only " + names.size() + " scenarios in " + FILE);
        return names;
    }

    static String fakeNodesBin() {
        String b = System.getenv("IDGEN_FAKE_NODES_BIN");
        if (b == null || b.isEmpty()) {
            fail("IDGEN_FAKE_NODES_BIN is not set (run_tests.sh sets it; build the binary with "
                    + "`cargo build -p idgen-testkit --bin idgen-fake-nodes`)");
        }
        File f = new File(b);
        if (!f.isFile() || !f.canExecute()) {
            fail("idgen-fake-nodes not found at " + b + ": build it with "
                    + "`cargo build -p idgen-testkit --bin idgen-fake-nodes` or set IDGEN_FAKE_NODES_BIN");
        }
        return b;
    }

    static long ms(Map<String, Object> client, String key, long dflt) {
        Object v = client == null ? null : client.get(key);
        return v == null ? dflt : ((Number) v).longValue();
    }

    /** The scenario vocabulary's name for what a call did: ok, invalid_argument, server_error STATUS, unavailable. */
    static String outcome(Throwable e) {
        if (e == null) {
            return "ok";
        }
        if (e instanceof IllegalArgumentException) {
            return "invalid_argument";
        }
        if (e instanceof ServerException se && !se.retryElsewhere() && !se.closesConnection()) {
            return "server_error " + se.status();
        }
        if (e instanceof UnavailableException) {
            return "unavailable";
        }
        return "other (" + e + ")";
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("names")
    void scenario(String name) throws Exception {
        Map<String, Object> s = null;
        for (Map<String, Object> c : all()) {
            if (name.equals(c.get("name"))) {
                s = c;
            }
        }
        assertTrue(s != null, name);
        Process p = new ProcessBuilder(fakeNodesBin(), Support.repo().resolve(FILE).toString(), name)
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        try {
            Map<String, Object> scn = s;
            // The process is destroyed below whatever happens, which also ends a blocked read.
            assertTimeoutPreemptively(LIMIT, () -> run(scn, p), name + ": took over " + LIMIT.toSeconds() + " s");
        } finally {
            p.getOutputStream().close();
            if (!p.waitFor(5, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                p.waitFor(5, TimeUnit.SECONDS);
            }
        }
    }

    @SuppressWarnings("unchecked")
    static void run(Map<String, Object> s, Process p) throws Exception {
        String name = (String) s.get("name");
        BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        Writer in = new OutputStreamWriter(p.getOutputStream(), StandardCharsets.UTF_8);
        String first = out.readLine();
        if (first == null || !first.startsWith("nodes ")) {
            fail(name + ": idgen-fake-nodes printed " + first + " (exit " + (p.isAlive() ? "-" : p.exitValue())
                    + "), not `nodes ADDR ...`");
        }
        List<String> addrs = Arrays.asList(first.substring("nodes ".length()).trim().split("\\s+"));
        Map<String, Object> client = (Map<String, Object>) s.get("client");
        try (IdgenClient c = IdgenClient.builder().nodes(addrs)
                .connectTimeout(Duration.ofMillis(ms(client, "connect_timeout_ms", 1000)))
                .requestTimeout(Duration.ofMillis(ms(client, "timeout_ms", 2000))).build()) {
            List<Map<String, Object>> steps = (List<Map<String, Object>>) s.get("steps");
            for (int i = 0; i < steps.size(); i++) {
                Map<String, Object> step = steps.get(i);
                String where = name + ", step " + i;
                if (step.containsKey("kill") || step.containsKey("revive")) {
                    String cmd = step.containsKey("kill") ? "kill " + step.get("kill") : "revive " + step.get("revive");
                    assertEquals("ok", command(in, out, cmd), where + ": " + cmd);
                } else if (step.containsKey("sleep_ms")) {
                    Thread.sleep(((Number) step.get("sleep_ms")).longValue());
                } else if ("next_ids".equals(step.get("call"))) {
                    int count = ((Number) step.get("count")).intValue();
                    String want = (String) step.get("expect");
                    if ("server_error".equals(want)) {
                        want += " " + step.get("status");
                    }
                    Throwable err = null;
                    try {
                        long[] ids = c.nextIds(count);
                        assertEquals(count, ids.length, where + ": IDs returned");
                    } catch (RuntimeException e) {
                        err = e;
                    }
                    assertEquals(want, outcome(err), where + ": next_ids(" + count + ")"
                            + (err == null ? "" : ": " + err));
                } else {
                    fail(where + ": unknown step " + step);
                }
            }
        }
        String check = command(in, out, "check");
        if (!"ok".equals(check)) {
            fail(name + ": what the nodes saw: " + check + " (report: " + command(in, out, "report") + ")");
        }
    }

    static String command(Writer in, BufferedReader out, String cmd) throws IOException {
        in.write(cmd + "\n");
        in.flush();
        String line = out.readLine();
        if (line == null) {
            fail("idgen-fake-nodes closed its output after `" + cmd + "`");
        }
        return line;
    }
}
