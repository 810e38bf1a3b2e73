package dev.idgen.client.bench;

import dev.idgen.client.IdgenClient;
import dev.idgen.client.TlsConfig;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;

/**
 * A throughput benchmark: {@code --connections} clients (one connection each) keep {@code
 * --pipeline} calls of {@code --batch} IDs in flight each for {@code --seconds}, and print one
 * JSON line: {@code {"client":"java","batch":N,"ids_per_sec":X,"requests_per_sec":Y,"errors":E}}
 * (failed calls are counted in {@code errors}, and the run goes on). {@code --ranges false}
 * asks for ID lists (GET_IDS) instead of runs on version 2 nodes.
 *
 * <pre>java -cp classes:bench-classes dev.idgen.client.bench.Bench --addr 127.0.0.1:7420 --batch 4096 --seconds 5</pre>
 *
 * It is a program beside the library, not part of it (src/bench, outside the jar), and uses only
 * the client's public API.
 *
 * TLS: {@code --tls-ca FILE} [{@code --tls-cert FILE --tls-key FILE}].
 */
public final class Bench {
    private Bench() {}

    public static void main(String[] args) throws Exception {
        String addr = "127.0.0.1:" + IdgenClient.DEFAULT_PORT;
        int batch = 1;
        double seconds = 5;
        int connections = 1;
        int pipeline = 16;
        String ca = null;
        String cert = null;
        String key = null;
        boolean ranges = true;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("-h") || a.equals("--help")) {
                System.out.println("usage: Bench --addr HOST:PORT --batch N --seconds S --connections C --pipeline P"
                        + " [--ranges true|false] [--tls-ca FILE [--tls-cert FILE --tls-key FILE]]");
                return;
            }
            if (i + 1 >= args.length) {
                fail(a + " needs a value");
            }
            String v = args[++i];
            try {
                switch (a) {
                    case "--addr" -> addr = v;
                    case "--batch" -> batch = Integer.parseInt(v);
                    case "--seconds" -> seconds = Double.parseDouble(v);
                    case "--connections" -> connections = Integer.parseInt(v);
                    case "--pipeline" -> pipeline = Integer.parseInt(v);
                    case "--tls-ca" -> ca = v;
                    case "--tls-cert" -> cert = v;
                    case "--tls-key" -> key = v;
                    case "--ranges" -> ranges = Boolean.parseBoolean(v);
                    default -> fail("unknown option " + a);
                }
            } catch (NumberFormatException e) {
                fail(a + ": not a number: " + v);
            }
        }
        if (batch < 1 || connections < 1 || pipeline < 1 || !(seconds > 0) || seconds > 3600) {
            fail("--batch, --connections and --pipeline must be >= 1, --seconds in (0, 3600]");
        }
        if ((cert == null) != (key == null)) {
            fail("--tls-cert and --tls-key go together");
        }
        TlsConfig tls = null;
        if (ca != null) {
            TlsConfig.Builder tb = TlsConfig.builder().caFile(Path.of(ca));
            if (cert != null) {
                tb.clientCertFiles(Path.of(cert), Path.of(key));
            }
            tls = tb.build();
        } else if (cert != null) {
            fail("--tls-cert needs --tls-ca");
        }

        List<IdgenClient> clients = new ArrayList<>();
        for (int c = 0; c < connections; c++) {
            IdgenClient.Builder b = IdgenClient.builder().nodes(addr).callDeadline(Duration.ofSeconds(10))
                    .requestTimeout(Duration.ofSeconds(5)).connectTimeout(Duration.ofSeconds(5)).useRanges(ranges);
            if (tls != null) {
                b.tls(tls);
            }
            IdgenClient client = b.build();
            clients.add(client);
            client.nextIds(batch); // connect and warm up
        }
        LongAdder ids = new LongAdder();
        LongAdder requests = new LongAdder();
        LongAdder errors = new LongAdder();
        AtomicReference<Throwable> error = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(connections * pipeline);
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        for (IdgenClient client : clients) {
            for (int p = 0; p < pipeline; p++) {
                new Loop(client, batch, end, ids, requests, errors, error, done).next();
            }
        }
        boolean finished = done.await((long) (seconds * 1000) + 30_000, TimeUnit.MILLISECONDS);
        double elapsed = (System.nanoTime() - start) / 1e9;
        for (IdgenClient client : clients) {
            client.close();
        }
        if (!finished) {
            fail("calls still outstanding 30 s after the end");
        }
        if (error.get() != null) {
            System.err.println("bench: " + errors.sum() + " calls failed; the first: " + error.get());
        }
        if (requests.sum() == 0) {
            fail("no call succeeded");
        }
        System.out.printf(java.util.Locale.ROOT,
                "{\"client\":\"java\",\"batch\":%d,\"ids_per_sec\":%.1f,\"requests_per_sec\":%.1f,\"errors\":%d}%n",
                batch, ids.sum() / elapsed, requests.sum() / elapsed, errors.sum());
    }

    /** One chain of calls: the next starts when the previous completes, until the end. */
    private record Loop(IdgenClient client, int batch, long end, LongAdder ids, LongAdder requests,
            LongAdder errors, AtomicReference<Throwable> error, CountDownLatch done) {
        void next() {
            if (System.nanoTime() >= end) {
                done.countDown();
                return;
            }
            client.nextIdsAsync(batch).whenComplete((v, e) -> {
                if (e != null) {
                    // Counted, reported, and the loop goes on after a pause (no spinning).
                    errors.increment();
                    error.compareAndSet(null, e instanceof CompletionException && e.getCause() != null ? e.getCause() : e);
                    CompletableFuture.delayedExecutor(10, TimeUnit.MILLISECONDS).execute(this::next);
                    return;
                }
                ids.add(v.length);
                requests.increment();
                next();
            });
        }
    }

    private static void fail(String message) {
        System.err.println("bench: " + message);
        System.exit(2);
    }
}
