package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.DataInputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/** Test helpers: paths, vectors, real nodes, an etcd, fake nodes. Every wait is bounded; only processes started here are stopped. */
final class Support {
    private Support() {}

    static Path repo() {
        String r = System.getProperty("idgen.repo", System.getenv("IDGEN_REPO"));
        if (r != null) {
            return Path.of(r);
        }
        Path p = Path.of("").toAbsolutePath();
        while (p != null && !Files.exists(p.resolve("protocol/PROTOCOL.md"))) {
            p = p.getParent();
        }
        if (p == null) {
            throw new IllegalStateException("cannot find the repository root (set IDGEN_REPO)");
        }
        return p;
    }

    static Object json(String relative) throws IOException {
        return Json.parse(Files.readString(repo().resolve(relative)));
    }

    static String idgenBin() {
        String b = System.getenv("IDGEN_BIN");
        String path = b != null && !b.isEmpty() ? b : repo().resolve("target/debug/idgen").toString();
        File f = new File(path);
        if (!f.isFile() || !f.canExecute()) {
            fail("idgen server binary not found at " + path + ": build it with `cargo build -p idgen` or set IDGEN_BIN");
        }
        return path;
    }

    static Path certs() {
        String d = System.getenv("IDGEN_TEST_CERTS");
        if (d == null || !Files.isRegularFile(Path.of(d, "ca.crt"))) {
            fail("IDGEN_TEST_CERTS must name a directory written by idgen-test-certs (run_tests.sh sets it); got " + d);
        }
        return Path.of(d);
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    /** A real {@code idgen serve} on 127.0.0.1, stopped by PID. */
    static final class Node implements AutoCloseable {
        final Process proc;
        final Path dir;
        final String addr;
        final String tlsAddr;
        private final List<String> lines = Collections.synchronizedList(new ArrayList<>());

        /** A node on the memory store with 2 shards, plus {@code extra} arguments. */
        static Node memory(String... extra) throws IOException {
            List<String> a = new ArrayList<>(List.of("--store", "memory", "--shards", "2"));
            a.addAll(List.of(extra));
            return new Node(a);
        }

        /**
         * A node on the embedded store (the default) in a new data directory, after {@code
         * seed} ran there (e.g. {@code idgen seq create ... --data-dir DIR}, which must run
         * before the node holds the store open), with 2 shards plus {@code extra} arguments.
         */
        static Node embedded(java.util.function.Consumer<Path> seed, String... extra) throws IOException {
            Path d = newDataDir();
            try {
                seed.accept(d);
            } catch (RuntimeException | Error e) {
                deleteTree(d);
                throw e;
            }
            List<String> a = new ArrayList<>(List.of("--shards", "2"));
            a.addAll(List.of(extra));
            return new Node(d, a);
        }

        Node(List<String> args) throws IOException {
            this(newDataDir(), args);
        }

        /** A new temporary data directory, once the binary is known to exist (none left behind otherwise). */
        private static Path newDataDir() throws IOException {
            idgenBin();
            return Files.createTempDirectory("idgen-javatest-");
        }

        /** A node on the memory store with 2 shards, {@code env} added to its environment. */
        static Node memoryWithEnv(java.util.Map<String, String> env, String... extra) throws IOException {
            List<String> a = new ArrayList<>(List.of("--store", "memory", "--shards", "2"));
            a.addAll(List.of(extra));
            return new Node(newDataDir(), a, env);
        }

        Node(Path dataDir, List<String> args) throws IOException {
            this(dataDir, args, java.util.Map.of());
        }

        Node(Path dataDir, List<String> args, java.util.Map<String, String> env) throws IOException {
            dir = dataDir;
            List<String> cmd = new ArrayList<>(List.of(idgenBin(), "serve", "--admin-listen", "off",
                    "--http-listen", "off", "--data-dir", dir.toString()));
            if (!args.contains("--listen")) {
                cmd.addAll(List.of("--listen", "127.0.0.1:0"));
            }
            cmd.addAll(args);
            boolean tls = args.contains("--tls-listen");
            ProcessBuilder pb = new ProcessBuilder(cmd);
            pb.environment().putAll(env);
            pb.redirectError(dir.resolve("stderr.log").toFile());
            pb.redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
            proc = pb.start();
            BufferedReader r = new BufferedReader(new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8));
            String plain = null;
            String secure = null;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            Thread drain = new Thread(() -> {
                try {
                    String line;
                    while ((line = r.readLine()) != null) {
                        lines.add(line);
                    }
                } catch (IOException ignored) {
                    // the node ended
                }
            }, "node-stdout");
            drain.setDaemon(true);
            drain.start();
            while (System.nanoTime() < deadline) {
                synchronized (lines) {
                    for (String l : lines) {
                        if (l.startsWith("listening with TLS on ")) {
                            secure = l.substring("listening with TLS on ".length()).trim();
                        } else if (l.startsWith("listening on ")) {
                            plain = l.substring("listening on ".length()).trim();
                        }
                    }
                }
                if (plain != null && (secure != null || !tls)) {
                    break;
                }
                if (!proc.isAlive()) {
                    break;
                }
                sleep(20);
            }
            if (plain == null || (tls && secure == null)) {
                stop();
                fail("idgen did not print its listening addresses within 30 s: " + lines + "\n" + log());
            }
            addr = plain;
            tlsAddr = secure;
        }

        List<String> output() {
            synchronized (lines) {
                return new ArrayList<>(lines);
            }
        }

        String log() {
            try {
                String s = Files.readString(dir.resolve("stderr.log"));
                return s.length() > 4000 ? s.substring(s.length() - 4000) : s;
            } catch (IOException e) {
                return "(no log)";
            }
        }

        /** SIGKILL, as a crash. */
        void kill() {
            proc.destroyForcibly();
            waitFor();
        }

        /** Sends {@code sig} with kill(1) (procps), and fails if it was not sent. */
        void signal(String sig) throws IOException, InterruptedException {
            Process k = new ProcessBuilder("kill", "-" + sig, Long.toString(proc.pid())).inheritIO().start();
            if (!k.waitFor(10, TimeUnit.SECONDS) || k.exitValue() != 0) {
                k.destroyForcibly();
                throw new IOException("kill -" + sig + " " + proc.pid() + " failed");
            }
        }

        void stop() {
            if (proc.isAlive()) {
                proc.destroy(); // SIGTERM
                try {
                    if (!proc.waitFor(15, TimeUnit.SECONDS)) {
                        proc.destroyForcibly();
                    }
                } catch (InterruptedException e) {
                    proc.destroyForcibly();
                }
            }
            waitFor();
        }

        private void waitFor() {
            try {
                proc.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }

        @Override
        public void close() {
            stop();
            deleteTree(dir);
        }
    }

    /**
     * Runs {@code idgen args...} to completion (at most 60 s, then killed by PID) and fails,
     * with its output, unless it exits 0. Returns its stdout.
     */
    static String idgen(String... args) {
        List<String> cmd = new ArrayList<>(List.of(idgenBin()));
        cmd.addAll(List.of(args));
        return run(cmd);
    }

    /**
     * Runs {@code cmd} (a program on PATH, e.g. openssl) to completion (at most 60 s, then
     * killed by PID) and fails, with its output, unless it exits 0. Returns its output.
     */
    static String run(List<String> cmd) {
        Path out = null;
        Process p = null;
        try {
            out = Files.createTempFile("idgen-javatest-cmd-", ".log");
            ProcessBuilder pb = new ProcessBuilder(cmd);
            pb.redirectErrorStream(true);
            pb.redirectOutput(out.toFile());
            pb.redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
            p = pb.start();
            if (!p.waitFor(60, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                p.waitFor(10, TimeUnit.SECONDS);
                fail(String.join(" ", cmd) + " did not finish within 60 s:\n" + Files.readString(out));
            }
            String text = Files.readString(out);
            if (p.exitValue() != 0) {
                fail(String.join(" ", cmd) + " exited " + p.exitValue() + ":\n" + text);
            }
            return text;
        } catch (IOException e) {
            fail("cannot run " + String.join(" ", cmd) + ": " + e);
            return null;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            if (p != null) {
                p.destroyForcibly();
            }
            fail("interrupted running " + String.join(" ", cmd));
            return null;
        } finally {
            if (out != null) {
                out.toFile().delete();
            }
        }
    }

    /** A single-member etcd on loopback ports, stopped by PID. */
    static final class Etcd implements AutoCloseable {
        final Process proc;
        final Path dir;
        final int clientPort;

        Etcd() throws IOException {
            dir = Files.createTempDirectory("idgen-javatest-etcd-");
            clientPort = freePort();
            int peer = freePort();
            String c = "http://127.0.0.1:" + clientPort;
            String p = "http://127.0.0.1:" + peer;
            ProcessBuilder pb = new ProcessBuilder("etcd", "--name", "t", "--data-dir", dir.resolve("data").toString(),
                    "--listen-client-urls", c, "--advertise-client-urls", c, "--listen-peer-urls", p,
                    "--initial-advertise-peer-urls", p, "--initial-cluster", "t=" + p);
            pb.redirectErrorStream(true);
            pb.redirectOutput(dir.resolve("etcd.log").toFile());
            try {
                proc = pb.start();
            } catch (IOException e) {
                fail("cannot start etcd (Debian etcd-server; scripts/deps test): " + e);
                throw e;
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (System.nanoTime() < deadline) {
                try (Socket s = new Socket("127.0.0.1", clientPort)) {
                    // Up; give it a moment to elect itself.
                    sleep(300);
                    return;
                } catch (IOException e) {
                    if (!proc.isAlive()) {
                        break;
                    }
                    sleep(50);
                }
            }
            close();
            fail("etcd did not come up within 20 s");
        }

        String store(String prefix) {
            return "etcd://127.0.0.1:" + clientPort + "/" + prefix;
        }

        @Override
        public void close() {
            proc.destroy();
            try {
                if (!proc.waitFor(10, TimeUnit.SECONDS)) {
                    proc.destroyForcibly();
                    proc.waitFor(10, TimeUnit.SECONDS);
                }
            } catch (InterruptedException e) {
                proc.destroyForcibly();
            }
            deleteTree(dir);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RuntimeException(e);
        }
    }

    static void deleteTree(Path p) {
        try (var w = Files.walk(p)) {
            w.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        } catch (IOException ignored) {
            // best effort
        }
    }

    // -----------------------------------------------------------------------------------
    // Fake nodes

    /** HELLO_OK; max_request_frame 128 from version 3 (the longest GET_VALUES is 69), else 64. */
    static byte[] helloOk(int version, long epoch, int regionBits, long maxBatch, long workerFirst, long workerCount) {
        return helloOk(version, epoch, regionBits, maxBatch, workerFirst, workerCount, version >= 3 ? 128 : 64);
    }

    static byte[] helloOk(int version, long epoch, int regionBits, long maxBatch, long workerFirst, long workerCount,
            long maxRequestFrame) {
        return ByteBuffer.allocate(37).putInt(33).put((byte) 0x81).putShort((short) version).putLong(epoch)
                .put((byte) 41).put((byte) 10).put((byte) 12).put((byte) regionBits).putInt((int) maxBatch)
                .putInt((int) maxRequestFrame).putInt((int) workerFirst).putInt((int) workerCount).putShort((short) 0)
                .array();
    }

    /** A VALUES frame (mode 0 dense, 1 strict; any other byte for bad frames). */
    static byte[] values(int mode, long... vs) {
        ByteBuffer b = ByteBuffer.allocate(10 + 8 * vs.length).putInt(6 + 8 * vs.length).put((byte) 0x85)
                .put((byte) mode).putInt(vs.length);
        for (long v : vs) {
            b.putLong(v);
        }
        return b.array();
    }

    /**
     * The version 7 UUID a node of the layout (epoch, worker bits, sequence bits) makes from
     * {@code id} with {@code random} in its random bits (PROTOCOL.md section 3.7), written out
     * with BigInteger, independently of the client's decoder.
     */
    static java.util.UUID uuidOf(long epoch, int workerBits, int sequenceBits, long id, long random) {
        int lowBits = workerBits + sequenceBits;
        int randomBits = 74 - lowBits;
        java.math.BigInteger one = java.math.BigInteger.ONE;
        java.math.BigInteger low = java.math.BigInteger.valueOf(id).and(one.shiftLeft(lowBits).subtract(one));
        java.math.BigInteger rnd = new java.math.BigInteger(Long.toUnsignedString(random))
                .and(one.shiftLeft(randomBits).subtract(one));
        java.math.BigInteger payload = low.shiftLeft(randomBits).or(rnd);
        java.math.BigInteger u = java.math.BigInteger.valueOf(epoch + (id >>> lowBits)).shiftLeft(80)
                .or(java.math.BigInteger.valueOf(7).shiftLeft(76))
                .or(payload.shiftRight(62).shiftLeft(64))
                .or(java.math.BigInteger.valueOf(2).shiftLeft(62))
                .or(payload.and(one.shiftLeft(62).subtract(one)));
        return new java.util.UUID(u.shiftRight(64).longValue(), u.longValue());
    }

    /** A UUIDS frame (0x86) of {@code us}. */
    static byte[] uuids(java.util.UUID... us) {
        ByteBuffer b = ByteBuffer.allocate(9 + 16 * us.length).putInt(5 + 16 * us.length).put((byte) 0x86)
                .putInt(us.length);
        for (java.util.UUID u : us) {
            b.putLong(u.getMostSignificantBits()).putLong(u.getLeastSignificantBits());
        }
        return b.array();
    }

    static byte[] error(int status, String message) {
        byte[] m = message.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(7 + m.length).putInt(3 + m.length).put((byte) 0xFF).putShort((short) status).put(m).array();
    }

    /** What a fake node does after the handshake. */
    enum Mode { SERVE, UNAVAILABLE, SILENT, GARBAGE, RANGE_CHANGED, BAD_VALUES }

    /** A named sequence of a fake node: values {@code next, next + 1, ...} up to {@code max}. */
    static final class Seq {
        volatile SequenceMode mode;
        final AtomicLong next;
        final long max;
        volatile boolean dropped;

        Seq(SequenceMode mode, long start, long max) {
            this.mode = mode;
            this.next = new AtomicLong(start);
            this.max = max;
        }
    }

    /**
     * A tiny idgen node: HELLO_OK with {@code hello}, then per {@code mode}: SERVE answers
     * GET_IDS/GET_RANGES/PING (IDs from one counter over every connection), UNAVAILABLE answers
     * ERROR {@code status}, SILENT nothing, GARBAGE a bad frame, RANGE_CHANGED serves {@code
     * serveBefore} requests on the first connection, then ERROR 305 and closes (later
     * connections get {@code helloAfter} and are served), BAD_VALUES answers GET_VALUES with
     * one value more than asked. Served GET_VALUES (version 3 connections) answer the
     * sequences of {@link #sequence}: 203 for a name it does not have (or, with {@link
     * #anyName}, creates it dense), 201 above max_batch, 307 past its maximum; before
     * version 3, 202 as a real node does. Every GET_VALUES count is recorded in {@link
     * #valueCounts}; {@link #delayMs} delays every answer.
     */
    static final class Fake implements AutoCloseable {
        final ServerSocket server;
        final String addr;
        final Mode mode;
        final int status;
        final int serveBefore;
        final byte[] hello;
        final byte[] helloAfter;
        final AtomicInteger connections = new AtomicInteger();
        final AtomicInteger requests = new AtomicInteger();
        final AtomicLong nextId = new AtomicLong(1L << 40);
        final List<Socket> open = Collections.synchronizedList(new ArrayList<>());
        final int version;
        final long maxBatch;
        final java.util.Map<String, Seq> sequences = new java.util.concurrent.ConcurrentHashMap<>();
        final List<Long> valueCounts = Collections.synchronizedList(new ArrayList<>());
        final AtomicInteger valueRequests = new AtomicInteger();
        volatile boolean anyName;
        /** Made from its count, the answer to every GET_UUIDS (version 4) instead of the UUIDs
         * of the counter's IDs. */
        volatile java.util.function.LongFunction<byte[]> uuidAnswer;
        /** The IDs whose UUIDs GET_UUIDS was answered with, in order. */
        final List<Long> uuidIds = Collections.synchronizedList(new ArrayList<>());
        volatile long delayMs;

        Fake(Mode mode, int status, int serveBefore, byte[] hello, byte[] helloAfter) throws IOException {
            this.mode = mode;
            this.status = status;
            this.serveBefore = serveBefore;
            this.hello = hello;
            this.helloAfter = helloAfter == null ? hello : helloAfter;
            this.version = ByteBuffer.wrap(hello).getShort(5);
            this.maxBatch = ByteBuffer.wrap(hello).getInt(19) & 0xFFFFFFFFL;
            server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            addr = "127.0.0.1:" + server.getLocalPort();
            Thread t = new Thread(this::accept, "fake-accept");
            t.setDaemon(true);
            t.start();
        }

        /** Adds (or replaces) sequence {@code name}. */
        Fake sequence(String name, SequenceMode mode, long start, long max) {
            sequences.put(name, new Seq(mode, start, max));
            return this;
        }

        /** The GET_VALUES counts received, in order. */
        List<Long> counts() {
            synchronized (valueCounts) {
                return new ArrayList<>(valueCounts);
            }
        }

        private void accept() {
            while (!server.isClosed()) {
                try {
                    Socket s = server.accept();
                    open.add(s);
                    int index = connections.getAndIncrement();
                    Thread t = new Thread(() -> handle(s, index), "fake-conn");
                    t.setDaemon(true);
                    t.start();
                } catch (IOException e) {
                    return;
                }
            }
        }

        private void handle(Socket s, int index) {
            try (s) {
                s.setTcpNoDelay(true);
                s.setSoTimeout(20_000);
                DataInputStream in = new DataInputStream(s.getInputStream());
                OutputStream out = s.getOutputStream();
                byte[] helloReq = new byte[13];
                in.readFully(helloReq);
                out.write(index == 0 ? hello : helloAfter);
                Mode m = mode == Mode.RANGE_CHANGED && index > 0 ? Mode.SERVE : mode;
                for (int k = 0; k < 1_000_000; k++) {
                    int len = in.readInt();
                    byte[] body = new byte[len];
                    in.readFully(body);
                    requests.incrementAndGet();
                    if (len > 0 && (body[0] & 0xFF) == 0x05) {
                        valueRequests.incrementAndGet();
                        valueCounts.add(ByteBuffer.wrap(body).getInt(1) & 0xFFFFFFFFL);
                    }
                    long delay = delayMs;
                    if (delay > 0) {
                        sleep(delay);
                    }
                    switch (m) {
                        case UNAVAILABLE -> {
                            out.write(error(status, "fake node says no"));
                            if (Status.closesConnection(status)) {
                                return;
                            }
                        }
                        case GARBAGE -> out.write(new byte[] {0, 0, 0, 9, (byte) 0x99, 'g', 'a', 'r', 'b', 'a', 'g', 'e', '!'});
                        case RANGE_CHANGED -> {
                            if (k >= serveBefore) {
                                out.write(error(305, "worker range changed"));
                                return;
                            }
                            out.write(answer(body));
                        }
                        case SERVE -> out.write(answer(body));
                        case BAD_VALUES -> {
                            if ((body[0] & 0xFF) == 0x05) {
                                long c = ByteBuffer.wrap(body).getInt(1) & 0xFFFFFFFFL;
                                long[] vs = new long[(int) c + 1];
                                for (int i = 0; i < vs.length; i++) {
                                    vs[i] = 1 + i;
                                }
                                out.write(values(0, vs));
                            } else {
                                out.write(answer(body));
                            }
                        }
                        case SILENT -> { }
                        default -> { }
                    }
                }
            } catch (IOException e) {
                // the client went away
            }
        }

        private byte[] answer(byte[] body) {
            ByteBuffer b = ByteBuffer.wrap(body);
            int op = b.get() & 0xFF;
            if (op == 0x03) {
                return ByteBuffer.allocate(13).putInt(9).put((byte) 0x83).putLong(b.getLong()).array();
            }
            if (op == 0x05) {
                return valuesAnswer(body);
            }
            if (op == 0x06) {
                return uuidsAnswer(body);
            }
            long count = b.getInt() & 0xFFFFFFFFL;
            if (count == 0) {
                return error(200, "count 0");
            }
            long first = nextId.getAndAdd(count);
            if (op == 0x04 && version >= 2) {
                return ByteBuffer.allocate(25).putInt(21).put((byte) 0x84).putInt((int) count).putInt(1).putLong(first)
                        .putInt((int) count).array();
            }
            ByteBuffer out = ByteBuffer.allocate(9 + 8 * (int) count).putInt(5 + 8 * (int) count).put((byte) 0x82)
                    .putInt((int) count);
            for (long i = 0; i < count; i++) {
                out.putLong(first + i);
            }
            return out.array();
        }

        private byte[] uuidsAnswer(byte[] body) {
            if (version < 4) {
                return error(202, "unknown opcode 0x06");
            }
            long count = ByteBuffer.wrap(body).getInt(1) & 0xFFFFFFFFL;
            if (count == 0) {
                return error(200, "GET_UUIDS count must be at least 1");
            }
            if (count > maxBatch) {
                return error(201, "GET_UUIDS count exceeds max_batch");
            }
            java.util.function.LongFunction<byte[]> scripted = uuidAnswer;
            if (scripted != null) {
                return scripted.apply(count);
            }
            ByteBuffer h = ByteBuffer.wrap(hello);
            long epoch = h.getLong(7);
            int w = h.get(16) & 0xFF;
            int s = h.get(17) & 0xFF;
            java.util.UUID[] us = new java.util.UUID[(int) count];
            long first = nextId.getAndAdd(count);
            for (int i = 0; i < us.length; i++) {
                long id = first + i;
                uuidIds.add(id);
                us[i] = uuidOf(epoch, w, s, id, id * 0x9E3779B97F4A7C15L);
            }
            return uuids(us);
        }

        private byte[] valuesAnswer(byte[] body) {
            if (version < 3) {
                return error(202, "unknown opcode 0x05");
            }
            long count = ByteBuffer.wrap(body).getInt(1) & 0xFFFFFFFFL;
            String name = new String(body, 5, body.length - 5, StandardCharsets.UTF_8);
            if (count == 0) {
                return error(200, "GET_VALUES count must be at least 1");
            }
            if (count > maxBatch || count > (1 << 20)) {
                return error(201, "GET_VALUES count exceeds max_batch");
            }
            if (!name.matches("[a-z0-9][a-z0-9._-]{0,63}")) {
                return error(204, "bad sequence name");
            }
            Seq q = anyName ? sequences.computeIfAbsent(name, x -> new Seq(SequenceMode.DENSE, 1, Long.MAX_VALUE))
                    : sequences.get(name);
            if (q == null || q.dropped) {
                return error(203, "no sequence " + name + " in this namespace");
            }
            long first;
            synchronized (q) {
                first = q.next.get();
                if (first - 1 + count > q.max) {
                    return error(307, "sequence " + name + " reached its maximum " + q.max);
                }
                q.next.addAndGet(count);
            }
            long[] vs = new long[(int) count];
            for (int i = 0; i < vs.length; i++) {
                vs[i] = first + i;
            }
            return values(q.mode == SequenceMode.DENSE ? 0 : 1, vs);
        }

        /** Stops accepting and cuts every open connection, as a crashed node would. */
        void kill() {
            close();
            synchronized (open) {
                for (Socket s : open) {
                    try {
                        s.close();
                    } catch (IOException ignored) {
                        // closing
                    }
                }
            }
        }

        @Override
        public void close() {
            try {
                server.close();
            } catch (IOException ignored) {
                // closing
            }
        }
    }

    static String readAll(InputStream in) throws IOException {
        return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
}
