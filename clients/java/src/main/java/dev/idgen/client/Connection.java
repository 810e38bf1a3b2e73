package dev.idgen.client;

import dev.idgen.client.Frames.Decoded;
import dev.idgen.client.Frames.ErrorFrame;
import dev.idgen.client.Frames.Frame;
import dev.idgen.client.Frames.HelloOk;
import dev.idgen.client.Frames.Ids;
import dev.idgen.client.Frames.Pong;
import dev.idgen.client.Frames.Ranges;
import dev.idgen.client.Frames.Values;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.UnknownHostException;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLSocket;

/**
 * One TCP (or TLS) connection to one node.
 *
 * <p>Pipelining: a FIFO of outstanding requests and one reader thread. A caller appends its
 * request frames to the connection's output buffer and their entries to the FIFO under one
 * lock, so the FIFO is in wire order; whichever caller finds no write in progress becomes the
 * writer and flushes everything queued meanwhile in one write (callers' requests coalesce).
 * The reader thread decodes answers and completes the entry at the head of the FIFO, as the
 * server answers strictly in order. A caller that stops waiting (deadline) leaves its entry;
 * its answer is matched by position and dropped.
 */
final class Connection {
    private static final int READ_CHUNK = 64 * 1024;

    /** One request frame awaiting its answer. */
    private static final class Pending {
        final int op;
        final long arg; // count, or PING token
        final byte[] name; // GET_VALUES: the sequence name (checked), else null
        byte[] frame; // GET_IDS_WITH: the whole request frame, else null
        long after = -1; // GET_IDS_WITH: the after option, or -1
        boolean masked; // GET_IDS_WITH: the masked option
        final CompletableFuture<Object> future = new CompletableFuture<>();

        Pending(int op, long arg) {
            this(op, arg, null);
        }

        Pending(int op, long arg, byte[] name) {
            this.op = op;
            this.arg = arg;
            this.name = name;
        }

        /** The request frame's size on the wire, length prefix included. */
        int wireSize() {
            if (frame != null) {
                return frame.length;
            }
            return name == null ? 13 : 9 + name.length;
        }
    }

    final String node;
    final HelloOk hello;
    final boolean ranges;
    final String alpn;
    final String tlsProtocol;
    private final long maxFrame;
    private final Socket socket;
    private final InputStream in;
    private final OutputStream out;
    private final Stats stats;
    private final Object lock = new Object();
    private final ArrayDeque<Pending> pending = new ArrayDeque<>();
    private ByteBuffer outBuf = ByteBuffer.allocate(4096);
    private ByteBuffer spare = ByteBuffer.allocate(4096);
    private boolean writing;
    private volatile IdgenException error;
    private volatile boolean idleClose;
    private boolean dispatching; // guarded by lock; set by the reader while it completes answers
    private final Thread reader;
    private byte[] buf;
    private int bufLen;
    private long lastId = -1;
    private java.util.UUID lastUuid; // the reader's: the last UUID answered on this connection

    /** The address that accepted the connection ({@code ip:port}). */
    String remoteAddress() {
        java.net.SocketAddress a = socket.getRemoteSocketAddress();
        if (a instanceof InetSocketAddress i && i.getAddress() != null) {
            String ip = i.getAddress().getHostAddress();
            return (ip.indexOf(':') >= 0 ? "[" + ip + "]" : ip) + ":" + i.getPort();
        }
        return String.valueOf(a);
    }

    private Connection(String node, Socket socket, HelloOk hello, byte[] rest, int restLen, boolean useRanges,
            Stats stats) throws IOException {
        this.node = node;
        this.socket = socket;
        this.hello = hello;
        this.ranges = useRanges && hello.version() >= Frames.RANGES_VERSION;
        this.maxFrame = Frames.responseFrameLimit(hello.maxBatch(), hello.version());
        this.in = socket.getInputStream();
        this.out = socket.getOutputStream();
        this.stats = stats;
        this.buf = rest;
        this.bufLen = restLen;
        if (socket instanceof SSLSocket s) {
            this.alpn = s.getApplicationProtocol();
            this.tlsProtocol = s.getSession().getProtocol();
        } else {
            this.alpn = null;
            this.tlsProtocol = null;
        }
        this.reader = new Thread(this::readLoop, "idgen-reader-" + node);
        this.reader.setDaemon(true);
    }

    /**
     * Connects, runs the TLS handshake when {@code tls} is given, sends HELLO (versions 1..3)
     * and waits for HELLO_OK, all within {@code timeoutMillis}.
     */
    static Connection open(String node, String host, int port, TlsConfig tls, long timeoutMillis,
            boolean useRanges, Stats stats) {
        return open(node, host, null, port, tls, timeoutMillis, useRanges, stats);
    }

    /**
     * As {@link #open(String, String, int, TlsConfig, long, boolean, Stats)}; with {@code fixed}
     * non-null, connects to that address only (a node of a name expanded to its addresses),
     * while TLS still verifies {@code host} (or the configured server name).
     */
    static Connection open(String node, String host, java.net.InetAddress fixed, int port, TlsConfig tls,
            long timeoutMillis, boolean useRanges, Stats stats) {
        long deadline = System.nanoTime() + timeoutMillis * 1_000_000L;
        Socket raw = fixed == null ? connectAny(node, host, port, deadline, timeoutMillis)
                : connectAny(node, new InetSocketAddress[] {new InetSocketAddress(fixed, port)}, deadline, timeoutMillis);
        Socket sock = raw;
        try {
            if (tls != null) {
                SSLSocket s;
                try {
                    s = tls.wrap(raw, host, port);
                    sock = s;
                    s.setSoTimeout(remaining(deadline));
                    s.startHandshake();
                } catch (SocketTimeoutException e) {
                    throw new UnavailableException("no TLS handshake within " + timeoutMillis + " ms", node, e);
                } catch (SSLException e) {
                    throw TlsErrors.classify(e, node);
                } catch (IOException e) {
                    throw closedAfterTls(node, tls, e);
                }
            }
            HelloResult hr = handshake(node, sock, deadline, tls);
            sock.setSoTimeout(0);
            Connection c = new Connection(node, sock, hr.hello, hr.buf, hr.len, useRanges, stats);
            stats.connects.increment();
            c.reader.start();
            return c;
        } catch (IOException e) {
            closeQuietly(sock);
            throw new UnavailableException("connection setup failed: " + e.getMessage(), node, e);
        } catch (RuntimeException e) {
            closeQuietly(sock);
            throw e;
        }
    }

    /**
     * A TCP connection to the first of {@code host}'s addresses that accepts one, tried one at a
     * time in the order {@link InetAddress#getAllByName} gives them (a name such as
     * {@code localhost} may resolve to ::1 and 127.0.0.1, and the node listen on only one).
     * A refused address moves on at once; each attempt may use at most an even share of the
     * time left before {@code deadline} (time left / addresses left), so one address that does
     * not answer cannot use up the others' time. Fails with the last address's error.
     */
    private static Socket connectAny(String node, String host, int port, long deadline, long timeoutMillis) {
        InetAddress[] resolved;
        try {
            resolved = InetAddress.getAllByName(host);
        } catch (UnknownHostException e) {
            throw new UnavailableException("cannot connect: unknown host " + host, node, e);
        }
        InetSocketAddress[] addrs = new InetSocketAddress[resolved.length];
        for (int i = 0; i < resolved.length; i++) {
            addrs[i] = new InetSocketAddress(resolved[i], port);
        }
        return connectAny(node, addrs, deadline, timeoutMillis);
    }

    /** {@link #connectAny(String, String, int, long, long)} on addresses already resolved. */
    static Socket connectAny(String node, InetSocketAddress[] addrs, long deadline, long timeoutMillis) {
        IOException last = null;
        for (int i = 0; i < addrs.length; i++) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                break;
            }
            int share = (int) Math.max(1, Math.min(Integer.MAX_VALUE, left / (addrs.length - i) / 1_000_000L));
            Socket s = new Socket();
            try {
                s.setTcpNoDelay(true);
                s.connect(addrs[i], share);
                return s;
            } catch (IOException e) {
                closeQuietly(s);
                last = e;
            }
        }
        String tried = addrs.length > 1 ? " (" + addrs.length + " addresses tried)" : "";
        if (last == null || last instanceof SocketTimeoutException) {
            throw new UnavailableException("connect timed out after " + timeoutMillis + " ms" + tried, node, last);
        }
        throw new UnavailableException("cannot connect: " + last.getMessage() + tried, node, last);
    }

    private record HelloResult(HelloOk hello, byte[] buf, int len) {}

    private static int remaining(long deadline) {
        long ms = (deadline - System.nanoTime()) / 1_000_000L;
        return (int) Math.max(1, Math.min(Integer.MAX_VALUE, ms));
    }

    private static HelloResult handshake(String node, Socket sock, long deadline, TlsConfig tls) throws IOException {
        byte[] buf = new byte[READ_CHUNK];
        int len = 0;
        Decoded d;
        try {
            OutputStream o = sock.getOutputStream();
            try {
                o.write(Frames.hello(Frames.MIN_VERSION, Frames.MAX_VERSION));
                o.flush();
            } catch (IOException e) {
                if (tls != null) {
                    // TLS 1.3: a node that refused the client certificate may have closed the
                    // connection already; its alert, still to be read, says why.
                    pendingAlert(sock, e);
                }
                throw e;
            }
            InputStream i = sock.getInputStream();
            while ((d = Frames.decodeResponse(buf, 0, len, Frames.DEFAULT_MAX_RESPONSE_FRAME)) == null) {
                if (System.nanoTime() >= deadline) {
                    throw new SocketTimeoutException();
                }
                sock.setSoTimeout(remaining(deadline));
                if (len == buf.length) {
                    buf = java.util.Arrays.copyOf(buf, buf.length * 2);
                }
                int n = i.read(buf, len, buf.length - len);
                if (n < 0) {
                    if (tls != null) {
                        throw closedAfterTls(node, tls, new EOFException("connection closed before HELLO_OK"));
                    }
                    throw new UnavailableException("connection closed during the handshake", node);
                }
                len += n;
            }
        } catch (SocketTimeoutException e) {
            throw new UnavailableException("no HELLO_OK in time", node, e);
        } catch (ProtocolException e) {
            throw e.withNode(node);
        } catch (SSLException e) {
            // TLS 1.3: a node that refuses the client certificate says so after the handshake.
            throw TlsErrors.classify(e, node);
        } catch (IOException e) {
            if (tls != null) {
                throw closedAfterTls(node, tls, e);
            }
            throw new UnavailableException("handshake failed: " + e.getMessage(), node, e);
        }
        Frame f = d.frame();
        if (f instanceof ErrorFrame e) {
            throw new ServerException(e.status(), e.message(), node);
        }
        if (!(f instanceof HelloOk h)) {
            throw new ProtocolException("expected HELLO_OK, got " + f.getClass().getSimpleName(), 0, node);
        }
        if (h.version() < Frames.MIN_VERSION || h.version() > Frames.MAX_VERSION) {
            throw new ProtocolException("server picked version " + h.version() + ", offered "
                    + Frames.MIN_VERSION + ".." + Frames.MAX_VERSION, 0, node);
        }
        int rest = len - d.consumed();
        byte[] restBuf = new byte[Math.max(READ_CHUNK, rest)];
        System.arraycopy(buf, d.consumed(), restBuf, 0, rest);
        return new HelloResult(h, restBuf, rest);
    }

    /** Reads what the peer sent before it closed; throws the TLS alert found there, if any. */
    private static void pendingAlert(Socket sock, IOException writeError) throws IOException {
        try {
            sock.setSoTimeout(200);
            sock.getInputStream().read();
        } catch (SSLException alert) {
            alert.addSuppressed(writeError);
            throw alert;
        } catch (IOException ignored) {
            // nothing more to learn: report the write's error
        }
    }

    /**
     * The node closed or reset a TLS connection during or right after the handshake, before
     * HELLO_OK and without an alert that could be read (a reset can discard it). With a client
     * certificate configured, that is the node refusing it (TLS 1.3 refuses after the
     * handshake, and the client's last handshake write can meet the reset).
     */
    private static TlsException closedAfterTls(String node, TlsConfig tls, IOException e) {
        if (e instanceof SSLException) {
            return TlsErrors.classify(e, node);
        }
        if (tls.hasClientCertificate()) {
            return new TlsException(TlsException.Kind.CLIENT_CERTIFICATE_REJECTED,
                    "the node closed the connection right after the handshake (" + e.getMessage()
                            + "): it refused the client certificate (expired, not yet valid, or not of its"
                            + " client authority)", node, e);
        }
        return TlsErrors.classify(e, node);
    }

    boolean alive() {
        return error == null;
    }

    /** Whether the server closed the connection while nothing was outstanding (its idle timeout). */
    boolean closedIdle() {
        return idleClose;
    }

    IdgenException error() {
        return error;
    }

    // ---------------------------------------------------------------------------------
    // Requests

    /** {@code n} IDs: one GET_IDS (or GET_RANGES) frame per {@code max_batch}, pipelined. */
    CompletableFuture<long[]> getIds(long n) {
        long max = hello.maxBatch();
        int op = ranges ? Frames.OP_GET_RANGES : Frames.OP_GET_IDS;
        if (n <= max || max == 0) {
            Pending p = new Pending(op, n);
            submit(new Pending[] {p});
            stats.requests.increment();
            return p.future.thenApply(o -> (long[]) o);
        }
        int parts = (int) ((n + max - 1) / max);
        Pending[] ps = new Pending[parts];
        long left = n;
        for (int i = 0; i < parts; i++) {
            long c = Math.min(left, max);
            ps[i] = new Pending(op, c);
            left -= c;
        }
        submit(ps);
        stats.requests.add(parts);
        CompletableFuture<long[]> all = new CompletableFuture<>();
        CompletableFuture<?>[] fs = new CompletableFuture<?>[parts];
        for (int i = 0; i < parts; i++) {
            fs[i] = ps[i].future;
            // A failed part fails the whole call at once (all or nothing).
            ps[i].future.whenComplete((v, e) -> {
                if (e != null) {
                    all.completeExceptionally(e);
                }
            });
        }
        CompletableFuture.allOf(fs).thenRun(() -> {
            long[] out = new long[(int) n];
            int k = 0;
            for (Pending p : ps) {
                long[] part = (long[]) p.future.join();
                System.arraycopy(part, 0, out, k, part.length);
                k += part.length;
            }
            all.complete(out);
        });
        return all;
    }

    /**
     * One GET_VALUES of at least {@code n} and at most {@code want} values of the sequence
     * {@code name} (bytes already checked against the name rule): {@code max(n, min(want,
     * max_batch))}, so a prefetch never asks above the node's limit. Completes with the VALUES
     * answer, whose count was checked.
     *
     * @throws SequencesUnsupportedException when the connection negotiated a version below 3
     * @throws IllegalArgumentException when {@code n} is above the node's max_batch or the
     *     frame above its max_request_frame
     */
    CompletableFuture<Values> getValues(byte[] name, int n, int want) {
        Frames.checkGetValues(hello.version(), hello.maxBatch(), hello.maxRequestFrame(), n, name, node);
        long cap = Math.min(hello.maxBatch(), Frames.MAX_VALUES_PER_CALL);
        long count = Math.max(n, Math.min(want, cap));
        Pending p = new Pending(Frames.OP_GET_VALUES, count, name);
        submit(new Pending[] {p});
        stats.valueRequests.increment();
        return p.future.thenApply(o -> (Values) o);
    }

    /**
     * One GET_IDS_WITH (protocol version 5) of {@code n} (1 ..= max_batch): completes with the
     * {@code long[]} IDs (IDS) or, when {@code masked}, a {@link MaskedIds} (MASKED_IDS).
     *
     * @throws IdsWithUnsupportedException when the connection negotiated a version below 5
     * @throws IllegalArgumentException when {@code n} is outside 1 ..= max_batch or the frame
     *     is above max_request_frame
     */
    CompletableFuture<Object> getIdsWith(int n, IdOptions options, boolean masked) {
        if (hello.version() < Frames.IDS_WITH_VERSION) {
            throw new IdsWithUnsupportedException(hello.version(), node);
        }
        if (n < 1 || n > hello.maxBatch()) {
            throw new IllegalArgumentException("n must be in 1 .. " + hello.maxBatch()
                    + " (the node's max_batch: one GET_IDS_WITH is never split), not " + n);
        }
        byte[] frame = Frames.getIdsWith(n, options.after(), options.key(), masked);
        if (frame.length - 4 > hello.maxRequestFrame()) {
            throw new IllegalArgumentException("GET_IDS_WITH of " + (frame.length - 4)
                    + " bytes is above the node's max_request_frame " + hello.maxRequestFrame());
        }
        Pending p = new Pending(Frames.OP_GET_IDS_WITH, n);
        p.frame = frame;
        p.after = options.after() == null ? -1 : options.after();
        p.masked = masked;
        submit(new Pending[] {p});
        return p.future;
    }

    /**
     * {@code n} (>= 1) version 7 UUIDs: GET_UUIDS split into max_batch-sized frames written at
     * once; completes with all of them, strictly increasing, or with the first part's failure.
     *
     * @throws UuidsUnsupportedException when the connection negotiated a version below 4
     */
    CompletableFuture<java.util.UUID[]> getUuids(long n) {
        if (hello.version() < Frames.UUIDS_VERSION) {
            throw new UuidsUnsupportedException(hello.version(), node);
        }
        long max = Math.max(hello.maxBatch(), 1);
        int parts = (int) ((n + max - 1) / max);
        Pending[] ps = new Pending[parts];
        long left = n;
        for (int i = 0; i < parts; i++) {
            long c = Math.min(left, max);
            ps[i] = new Pending(Frames.OP_GET_UUIDS, c);
            left -= c;
        }
        submit(ps);
        stats.uuidRequests.add(parts);
        CompletableFuture<java.util.UUID[]> all = new CompletableFuture<>();
        CompletableFuture<?>[] fs = new CompletableFuture<?>[parts];
        for (int i = 0; i < parts; i++) {
            fs[i] = ps[i].future;
            // A failed part fails the whole call at once (all or nothing).
            ps[i].future.whenComplete((v, e) -> {
                if (e != null) {
                    all.completeExceptionally(e);
                }
            });
        }
        CompletableFuture.allOf(fs).thenRun(() -> {
            java.util.UUID[] out = new java.util.UUID[(int) n];
            int k = 0;
            for (Pending p : ps) {
                java.util.UUID[] part = (java.util.UUID[]) p.future.join();
                System.arraycopy(part, 0, out, k, part.length);
                k += part.length;
            }
            all.complete(out);
        });
        return all;
    }

    /** PING; completes with the token echoed. */
    CompletableFuture<Object> ping(long token) {
        Pending p = new Pending(Frames.OP_PING, token);
        submit(new Pending[] {p});
        stats.pings.increment();
        return p.future;
    }

    private void submit(Pending[] ps) {
        synchronized (lock) {
            IdgenException e = error;
            if (e != null) {
                throw e;
            }
            int need = 0;
            for (Pending p : ps) {
                need += p.wireSize();
            }
            if (outBuf.remaining() < need) {
                ByteBuffer b = ByteBuffer.allocate(Math.max(outBuf.capacity() * 2, outBuf.position() + need));
                outBuf.flip();
                b.put(outBuf);
                outBuf = b;
            }
            for (Pending p : ps) {
                pending.addLast(p);
                if (p.op == Frames.OP_PING) {
                    outBuf.putInt(9).put((byte) Frames.OP_PING).putLong(p.arg);
                } else if (p.op == Frames.OP_GET_VALUES) {
                    Frames.putGetValues(outBuf, p.arg, p.name);
                } else if (p.frame != null) {
                    outBuf.put(p.frame);
                } else {
                    Frames.putCountFrame(outBuf, p.op, p.arg);
                }
            }
            if (writing) {
                return; // the thread writing now sends these too
            }
            if (dispatching && Thread.currentThread() == reader) {
                return; // a callback of an answer: sent with the others once the read is handled
            }
            writing = true;
        }
        flush();
    }

    /** On the reader, after handling what one read brought: sends what callbacks queued. */
    private void flushQueued() {
        synchronized (lock) {
            if (writing || outBuf.position() == 0) {
                return;
            }
            writing = true;
        }
        flush();
    }

    private void flush() {
        while (true) {
            ByteBuffer b;
            synchronized (lock) {
                if (outBuf.position() == 0 || error != null) {
                    writing = false;
                    return;
                }
                b = outBuf;
                outBuf = spare;
                spare = b;
            }
            try {
                out.write(b.array(), 0, b.position());
                out.flush();
            } catch (IOException e) {
                // The peer may have closed after a closing ERROR (a 305, say): that frame is
                // in the socket; let the reader report it, as it says what happened.
                if (Thread.currentThread() != reader) {
                    try {
                        reader.join(1000);
                    } catch (InterruptedException ie) {
                        Thread.currentThread().interrupt();
                    }
                }
                fail(new UnavailableException("send failed: " + e.getMessage(), node, e));
                synchronized (lock) {
                    writing = false;
                }
                return;
            } finally {
                b.clear();
            }
        }
    }

    /**
     * Breaks the connection with {@code e}: every outstanding request fails with it, later
     * requests fail at once, and the socket is closed (which stops the reader).
     */
    void fail(IdgenException e) {
        List<Pending> failed;
        synchronized (lock) {
            if (error != null) {
                return;
            }
            error = e;
            failed = new ArrayList<>(pending);
            pending.clear();
        }
        closeQuietly(socket);
        for (Pending p : failed) {
            p.future.completeExceptionally(e);
        }
    }

    void close() {
        fail(new ClientClosedException(node + ": connection closed by the client"));
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }

    // ---------------------------------------------------------------------------------
    // Reader

    private void readLoop() {
        try {
            while (error == null) {
                int off = 0;
                Decoded d;
                synchronized (lock) {
                    dispatching = true;
                }
                try {
                    while ((d = Frames.decodeResponse(buf, off, bufLen - off, maxFrame)) != null) {
                        off += d.consumed();
                        dispatch(d.frame());
                    }
                } finally {
                    synchronized (lock) {
                        dispatching = false;
                    }
                }
                flushQueued();
                if (off > 0) {
                    System.arraycopy(buf, off, buf, 0, bufLen - off);
                    bufLen -= off;
                }
                if (bufLen == buf.length) {
                    // A frame larger than the buffer (its length is within maxFrame, checked).
                    buf = java.util.Arrays.copyOf(buf, (int) Math.min(Math.max(buf.length * 2L, READ_CHUNK), maxFrame + 4));
                }
                int n = in.read(buf, bufLen, buf.length - bufLen);
                if (n < 0) {
                    boolean idle;
                    synchronized (lock) {
                        idle = pending.isEmpty() && bufLen == 0;
                    }
                    if (idle) {
                        idleClose = true;
                        fail(new UnavailableException("connection closed by the server (idle)", node));
                    } else if (bufLen > 0) {
                        fail(new UnavailableException("connection closed in the middle of a frame", node,
                                new EOFException()));
                    } else {
                        fail(new UnavailableException("connection closed by the server with requests unanswered", node));
                    }
                    return;
                }
                bufLen += n;
            }
        } catch (ProtocolException e) {
            fail(e.withNode(node));
        } catch (SSLException e) {
            fail(TlsErrors.classify(e, node));
        } catch (IOException e) {
            fail(new UnavailableException("receive failed: " + e.getMessage(), node, e));
        } catch (RuntimeException | Error e) {
            fail(new ProtocolException("reader failed: " + e, 0, node));
        }
    }

    private void dispatch(Frame frame) {
        Pending p;
        synchronized (lock) {
            p = pending.pollFirst();
        }
        if (p == null) {
            throw new ProtocolException(frame.getClass().getSimpleName() + " with no request outstanding", 0, node);
        }
        if (frame instanceof ErrorFrame ef) {
            ServerException se = new ServerException(ef.status(), ef.message(), node);
            // The connection fails first (callbacks of the answer see it failed, and do not
            // take it for one that is still open).
            if (ef.status() == Status.RANGE_CHANGED) {
                // Every request in flight gets the 305 too: this connection is over, the node
                // is not, so they reconnect rather than count the node as down.
                fail(se);
            } else if (ef.closes()) {
                String name = ef.name() == null ? "UNKNOWN" : ef.name();
                fail(new UnavailableException(
                        "server closed the connection after ERROR " + ef.status() + " " + name, node));
            }
            p.future.completeExceptionally(se);
            return;
        }
        ProtocolException bad;
        switch (p.op) {
            case Frames.OP_GET_IDS, Frames.OP_GET_RANGES -> {
                long[] ids = null;
                if (p.op == Frames.OP_GET_IDS && frame instanceof Ids f) {
                    if (f.ids().length != p.arg) {
                        throw complain(p, "asked for " + p.arg + " IDs, got " + f.ids().length);
                    }
                    ids = f.ids();
                } else if (p.op == Frames.OP_GET_RANGES && frame instanceof Ranges r) {
                    if (r.total() != p.arg) {
                        throw complain(p, "asked for " + p.arg + " IDs, got RANGES of " + r.total());
                    }
                    ids = r.expand();
                }
                if (ids == null) {
                    throw complain(p, (p.op == Frames.OP_GET_IDS ? "GET_IDS" : "GET_RANGES") + " answered with "
                            + frame.getClass().getSimpleName());
                }
                if (ids[0] <= lastId) {
                    throw complain(p, "IDs on one connection are not increasing");
                }
                lastId = ids[ids.length - 1];
                stats.ids.add(ids.length);
                p.future.complete(ids);
            }
            case Frames.OP_GET_IDS_WITH -> {
                if (p.masked) {
                    if (!(frame instanceof Frames.MaskedIds m)) {
                        throw complain(p, "masked GET_IDS_WITH answered with " + frame.getClass().getSimpleName());
                    }
                    if (m.masked().length != p.arg) {
                        throw complain(p, "asked for " + p.arg + " IDs, got MASKED_IDS of " + m.masked().length);
                    }
                    stats.ids.add(m.masked().length);
                    p.future.complete(new MaskedIds(m.keyId(), m.masked()));
                    return;
                }
                if (!(frame instanceof Ids f)) {
                    throw complain(p, "GET_IDS_WITH answered with " + frame.getClass().getSimpleName());
                }
                long[] ids = f.ids();
                if (ids.length != p.arg) {
                    throw complain(p, "asked for " + p.arg + " IDs, got " + ids.length);
                }
                for (int i = 1; i < ids.length; i++) {
                    if (ids[i] <= ids[i - 1]) {
                        throw complain(p, "IDS answer is not increasing");
                    }
                }
                if (ids[0] <= p.after) {
                    throw complain(p, "IDs not above after " + p.after);
                }
                // A repeat of an idempotent answer may be below what the connection saw since.
                if (ids[0] > lastId) {
                    lastId = ids[ids.length - 1];
                }
                stats.ids.add(ids.length);
                p.future.complete(ids);
            }
            case Frames.OP_GET_UUIDS -> {
                if (!(frame instanceof Frames.Uuids u)) {
                    throw complain(p, "GET_UUIDS answered with " + frame.getClass().getSimpleName());
                }
                java.util.UUID[] uuids = u.uuids();
                if (uuids.length != p.arg) {
                    throw complain(p, "asked for " + p.arg + " UUIDs, got UUIDS of " + uuids.length);
                }
                if (lastUuid != null && !Frames.uuidBelow(lastUuid, uuids[0])) {
                    throw complain(p, "UUIDs on one connection are not increasing");
                }
                lastUuid = uuids[uuids.length - 1];
                stats.uuids.add(uuids.length);
                p.future.complete(uuids);
            }
            case Frames.OP_GET_VALUES -> {
                if (!(frame instanceof Values v)) {
                    throw complain(p, "GET_VALUES answered with " + frame.getClass().getSimpleName());
                }
                if (v.values().length != p.arg) {
                    throw complain(p, "asked for " + p.arg + " values, got VALUES of " + v.values().length);
                }
                stats.values.add(v.values().length);
                p.future.complete(v);
            }
            default -> {
                if (frame instanceof Pong pong && pong.token() == p.arg) {
                    p.future.complete(pong.token());
                    return;
                }
                bad = complain(p, "PING " + Long.toUnsignedString(p.arg) + " answered with " + frame);
                throw bad;
            }
        }
    }

    private ProtocolException complain(Pending p, String message) {
        ProtocolException e = new ProtocolException(message, 0, node);
        p.future.completeExceptionally(e);
        return e;
    }
}
