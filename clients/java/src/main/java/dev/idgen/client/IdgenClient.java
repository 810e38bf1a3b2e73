package dev.idgen.client;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

/**
 * A thread-safe client for a cluster of idgen nodes.
 *
 * <pre>{@code
 * try (IdgenClient client = IdgenClient.builder().nodes("127.0.0.1:7420").build()) {
 *     long id = client.nextId();
 *     long[] batch = client.nextIds(1000);
 *     CompletableFuture<long[]> later = client.nextIdsAsync(10, Duration.ofMillis(200));
 * }
 * }</pre>
 *
 * <h2>Pipelining</h2>
 * Every node has at most one connection, shared by all callers; any number of requests are in
 * flight on it at once, and requests queued while a write is in progress go out together in
 * the next write. The {@code *Async} methods return at once with a {@link CompletableFuture};
 * the blocking methods wait for it. Futures complete on the connection's reader thread: do
 * not block in their callbacks. A batch above the node's {@code max_batch} is split into
 * pipelined requests and re-joined. On protocol version 2 batches travel as runs (GET_RANGES)
 * and are expanded here.
 *
 * <h2>Failover</h2>
 * Calls go to the node that answered the last call (sticky). A node that answers "try another
 * node" ({@code 3xx} except {@code EXHAUSTED} and {@code SEQUENCE_USED_UP}), does not answer
 * within the request timeout,
 * refuses, drops or breaks the connection, sends a bad frame, or fails the TLS handshake is
 * marked down for a backoff (from {@code backoffMin}, doubling per consecutive failure, up to
 * {@code backoffMax}) and the whole call is retried on the next node; healthy nodes first, then
 * those backing off, soonest first; each node at most once per call, all within the call's
 * deadline. {@code RANGE_CHANGED} (305) is not a node failure: the client reconnects to the
 * same node at once (its new HELLO_OK announces the new range) and retries the call there,
 * once per call. A status that closes the connection ({@code 1xx}, {@code 5xx}) is a node
 * failure like "try another node". Statuses another node would repeat ({@code 2xx}, {@code
 * EXHAUSTED}, {@code SEQUENCE_USED_UP}) fail the call at once.
 * Failover leaves gaps in the ID space, never duplicates: a node never sends an ID twice.
 *
 * <h2>Ordering</h2>
 * IDs of one call are strictly increasing; IDs of successive calls increase while they come
 * from one connection. After a failover or a reconnect they come from another worker range.
 *
 * <h2>Prefetch</h2>
 * With {@link Builder#prefetch(int)}, {@link #nextId()} serves single IDs from a local pool
 * refilled in the background when it falls below its low-water mark. Every ID in it is handed
 * out once (never twice, whatever the number of threads); IDs still in it at {@link #close()}
 * are dropped (a gap). IDs age in the pool: an ID's timestamp may be older than the moment it
 * is handed out.
 *
 * <h2>Named sequences</h2>
 * {@link #nextValue(String)} and {@link #nextValues(String, int)} take values of a sequence an
 * operator created ({@code idgen seq create}), over protocol version 3 (GET_VALUES), with the
 * same deadlines and failover as IDs (clients/vectors/SEQUENCES.md). A bad name or count is an
 * {@link IllegalArgumentException} before anything is sent; {@code UNKNOWN_SEQUENCE}, {@code
 * INVALID_SEQUENCE_NAME} and {@code SEQUENCE_USED_UP} fail the call at once with a {@link
 * ServerException}; {@code SEQUENCE_UNAVAILABLE} and {@code BUSY} try another node. A node
 * that negotiated version 1 or 2 fails the call with {@link SequencesUnsupportedException}.
 * With {@link Builder#sequencePrefetch(int)}, values of dense sequences are fetched ahead and
 * kept per name; strict sequences' values never are.
 *
 * <h2>Configuration and events</h2>
 * {@link #fromUrl(String)}, {@link #fromEnv()} and {@link Builder#url(String)} take nodes, TLS,
 * timeouts and {@code expand} from an {@code idgen://}/{@code idgens://} URL or from {@code
 * IDGEN_NODES} and {@code IDGEN_CLIENT_*} ({@link ClientConfig}, clients/vectors/CONFIG.md); a
 * setting given there and in code is an error. With {@link Builder#expand(boolean)} each address
 * of a name is a node of its own. Events (connects, requests, refusals, failovers, nodes down and
 * up) go to {@code System.getLogger("dev.idgen.client")} and to an optional {@link
 * IdgenListener}; see {@link IdgenEvent}.
 */
public final class IdgenClient implements AutoCloseable {
    /** The default ID port of {@code idgen serve}. */
    public static final int DEFAULT_PORT = 7420;
    private static final int MAX_IDS_PER_CALL = 1 << 24;

    /** The nodes now: the configured ones, or with expand their names' addresses. */
    private volatile List<Node> nodes;
    /** The nodes as configured (host:port), in order. */
    private final List<Node> entries;
    private final boolean expand;
    private final Events events;
    private final Object resolveLock = new Object();
    private long lastResolve; // System.nanoTime() of the last resolution; guarded by resolveLock
    private final Function<String, java.net.InetAddress[]> resolver;
    private final TlsConfig tls;
    private final Duration connectTimeout;
    private final Duration requestTimeout;
    private final Duration callDeadline;
    private final Duration backoffMin;
    private final Duration backoffMax;
    private final boolean useRanges;
    final Stats stats = new Stats();
    private final ScheduledThreadPoolExecutor timers;
    private final ExecutorService workers;
    private final PrefetchPool prefetch;
    private final SequencePrefetch sequencePrefetch;
    private final AtomicLong tokens = new AtomicLong(1);
    private volatile Node preferred;
    private volatile Layout layout;
    private volatile boolean closed;

    /** One node and its state. */
    private static final class Node {
        final String address;
        final String host;
        final int port;
        /** With expand: the one address this node is (TLS still verifies {@code host}); else null. */
        final java.net.InetAddress fixed;
        /** With expand: its name no longer resolves to it; dropped once its connection fails. */
        volatile boolean gone;
        final Object connectLock = new Object();
        volatile Connection conn;
        // Guarded by `this`:
        int failures;
        long downUntil; // System.nanoTime(), 0 when up
        Throwable lastError;

        /** An address of {@code entry}'s name, a node of its own (expand). */
        Node(Node entry, java.net.InetAddress addr) {
            String ip = addr.getHostAddress();
            this.address = (ip.indexOf(':') >= 0 ? "[" + ip + "]" : ip) + ":" + entry.port;
            this.host = entry.host;
            this.port = entry.port;
            this.fixed = addr;
        }

        Node(String address) {
            this.fixed = null;
            this.address = address;
            int colon = address.lastIndexOf(':');
            if (colon <= 0 || colon == address.length() - 1) {
                throw new IllegalArgumentException("node " + address + " is not host:port");
            }
            String h = address.substring(0, colon);
            if (h.startsWith("[") && h.endsWith("]")) {
                h = h.substring(1, h.length() - 1);
            }
            int p;
            try {
                p = Integer.parseInt(address.substring(colon + 1));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("node " + address + " is not host:port");
            }
            if (p <= 0 || p > 65535 || h.isEmpty()) {
                throw new IllegalArgumentException("node " + address + " is not host:port");
            }
            this.host = h;
            this.port = p;
        }
    }

    private IdgenClient(Builder b) {
        List<String> addresses = b.nodes;
        TlsConfig tlsConfig = b.tls;
        Duration connect = b.connectTimeout;
        Duration request = b.requestTimeout;
        boolean expandNames = b.expand;
        ClientConfig cfg = b.config;
        if (cfg != null) {
            // Each setting has one source: code, or the URL / the environment.
            String src = cfg.source();
            if (!b.nodes.isEmpty()) {
                throw both("the nodes", src);
            }
            if (b.tls != null) {
                throw both("TLS", src);
            }
            if (cfg.connectTimeoutMs() != null) {
                if (b.connectTimeoutSet) {
                    throw both("the connect timeout", src);
                }
                connect = Duration.ofMillis(cfg.connectTimeoutMs());
            }
            if (cfg.timeoutMs() != null) {
                if (b.requestTimeoutSet) {
                    throw both("the request timeout", src);
                }
                request = Duration.ofMillis(cfg.timeoutMs());
            }
            if (cfg.expandGiven()) {
                if (b.expandSet) {
                    throw both("expand", src);
                }
                expandNames = cfg.expand();
            }
            addresses = cfg.nodes();
            tlsConfig = cfg.tlsConfig();
        }
        List<Node> ns = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        for (String a : addresses) {
            if (!seen.add(a)) {
                throw new IllegalArgumentException("node " + a + " is listed twice");
            }
            ns.add(new Node(a));
        }
        if (ns.isEmpty()) {
            throw new IllegalArgumentException("at least one node is required");
        }
        this.entries = List.copyOf(ns);
        this.expand = expandNames;
        this.events = new Events(b.listener);
        this.resolver = b.resolver != null ? b.resolver : IdgenClient::resolveName;
        this.nodes = this.entries;
        if (expandNames) {
            synchronized (resolveLock) {
                this.nodes = resolved(List.of());
                lastResolve = System.nanoTime();
            }
        }
        this.tls = tlsConfig;
        this.connectTimeout = connect;
        this.requestTimeout = request;
        this.callDeadline = b.callDeadline;
        this.backoffMin = b.backoffMin;
        this.backoffMax = b.backoffMax;
        this.useRanges = b.useRanges;
        this.timers = new ScheduledThreadPoolExecutor(1, daemon("idgen-timer"));
        this.timers.setRemoveOnCancelPolicy(true);
        this.workers = Executors.newCachedThreadPool(daemon("idgen-worker"));
        this.prefetch = b.prefetch > 0 ? new PrefetchPool(this, b.prefetch, b.lowWater) : null;
        this.sequencePrefetch = b.sequencePrefetch > 0 ? new SequencePrefetch(this, b.sequencePrefetch) : null;
    }

    private static IllegalArgumentException both(String what, String source) {
        return new IllegalArgumentException(what + " given both in code and in " + source
                + ": give each setting once (never a silent precedence)");
    }

    private static ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    /** A builder; at least one node is required. */
    public static Builder builder() {
        return new Builder();
    }

    /** A client with default settings for these nodes ({@code host:port}). */
    public static IdgenClient create(String... nodes) {
        return builder().nodes(nodes).build();
    }

    /**
     * A client for an {@code idgen://} or {@code idgens://} URL (clients/vectors/CONFIG.md, {@link
     * ClientConfig#parseUrl(String)}), other settings at their defaults.
     *
     * @throws IllegalArgumentException for a bad URL, before any connection
     */
    public static IdgenClient fromUrl(String url) {
        return builder().url(url).build();
    }

    /**
     * A client for a URL with further settings from {@code options} (a {@link #builder()}); a
     * setting given both in {@code options} and in the URL is an {@link IllegalArgumentException}.
     */
    public static IdgenClient fromUrl(String url, Builder options) {
        return options.url(url).build();
    }

    /** A client from the environment ({@code IDGEN_NODES}, {@code IDGEN_CLIENT_*}: {@link ClientConfig#fromEnv()}). */
    public static IdgenClient fromEnv() {
        return builder().fromEnv().build();
    }

    /** A client from the environment with further settings from {@code options}; none may be given twice. */
    public static IdgenClient fromEnv(Builder options) {
        return options.fromEnv().build();
    }

    /** Settings of an {@link IdgenClient}. */
    public static final class Builder {
        private final List<String> nodes = new ArrayList<>();
        private TlsConfig tls;
        private Duration connectTimeout = Duration.ofSeconds(2);
        private Duration requestTimeout = Duration.ofSeconds(1);
        private Duration callDeadline = Duration.ofSeconds(5);
        private Duration backoffMin = Duration.ofMillis(200);
        private Duration backoffMax = Duration.ofSeconds(10);
        private int prefetch;
        private int lowWater = -1;
        private int sequencePrefetch;
        private boolean useRanges = true;
        private boolean connectTimeoutSet;
        private boolean requestTimeoutSet;
        private boolean expand;
        private boolean expandSet;
        private ClientConfig config;
        private IdgenListener listener;
        private Function<String, java.net.InetAddress[]> resolver;

        private Builder() {}

        /**
         * Nodes, TLS, timeouts and expand from a URL ({@link ClientConfig#parseUrl(String)}); a
         * setting given here too (nodes, tls, connectTimeout, requestTimeout, expand) is an error
         * at {@link #build()}.
         */
        public Builder url(String url) {
            return config(ClientConfig.parseUrl(url));
        }

        /** Nodes, TLS and timeouts from the environment ({@link ClientConfig#fromEnv()}); as {@link #url}. */
        public Builder fromEnv() {
            return config(ClientConfig.fromEnv());
        }

        /** Nodes, TLS, timeouts and expand from {@code config}; as {@link #url}. */
        public Builder config(ClientConfig config) {
            Objects.requireNonNull(config, "config");
            if (this.config != null) {
                throw new IllegalArgumentException("a URL or environment is given twice");
            }
            this.config = config;
            return this;
        }

        /**
         * Whether each address a node's name resolves to is a node of its own (a Kubernetes
         * headless Service: every ready pod), re-resolved when a node fails (at most once a
         * second). TLS still verifies the name. Default false: a name is one node whose addresses
         * are tried in turn.
         */
        public Builder expand(boolean on) {
            this.expand = on;
            this.expandSet = true;
            return this;
        }

        /** Receives every event of the client ({@link IdgenEvent}); see {@link IdgenListener}. */
        public Builder listener(IdgenListener listener) {
            this.listener = Objects.requireNonNull(listener, "listener");
            return this;
        }

        /** The resolver expand uses (tests); an unknown name gives an empty array. */
        Builder resolver(Function<String, java.net.InetAddress[]> resolver) {
            this.resolver = resolver;
            return this;
        }

        /** Adds nodes ({@code host:port}, IPv6 as {@code [::1]:7420}), tried in this order. */
        public Builder nodes(String... addresses) {
            for (String a : addresses) {
                nodes.add(Objects.requireNonNull(a, "node"));
            }
            return this;
        }

        /** Adds nodes. */
        public Builder nodes(List<String> addresses) {
            return nodes(addresses.toArray(new String[0]));
        }

        /** Connect over TLS (every node), verifying nodes as {@code tls} says. */
        public Builder tls(TlsConfig tls) {
            this.tls = Objects.requireNonNull(tls);
            return this;
        }

        /** Limit for connecting to one node: TCP, TLS and HELLO. Default 2 s. */
        public Builder connectTimeout(Duration d) {
            this.connectTimeout = positive(d, "connectTimeout");
            this.connectTimeoutSet = true;
            return this;
        }

        /** Limit for one node's answer; a node silent for this long counts as failed. Default 1 s. */
        public Builder requestTimeout(Duration d) {
            this.requestTimeout = positive(d, "requestTimeout");
            this.requestTimeoutSet = true;
            return this;
        }

        /** Default limit for a whole call over every node it tries. Default 5 s. */
        public Builder callDeadline(Duration d) {
            this.callDeadline = positive(d, "callDeadline");
            return this;
        }

        /** How long a failed node is skipped, first and at most. Defaults 200 ms and 10 s. */
        public Builder backoff(Duration min, Duration max) {
            positive(min, "backoff min");
            positive(max, "backoff max");
            if (min.compareTo(max) > 0) {
                throw new IllegalArgumentException("backoff min is above backoff max");
            }
            this.backoffMin = min;
            this.backoffMax = max;
            return this;
        }

        /** Keep a pool of up to {@code size} IDs for {@link #nextId()}, refilled below {@code size / 4}. */
        public Builder prefetch(int size) {
            return prefetch(size, size / 4);
        }

        /** Keep a pool of up to {@code size} IDs, refilled when it holds fewer than {@code lowWater}. */
        public Builder prefetch(int size, int lowWater) {
            if (size < 0 || size > MAX_IDS_PER_CALL) {
                throw new IllegalArgumentException("prefetch size must be in 0 .. " + MAX_IDS_PER_CALL);
            }
            if (size > 0 && (lowWater < 0 || lowWater >= size)) {
                throw new IllegalArgumentException("lowWater must be in 0 .. size - 1");
            }
            this.prefetch = size;
            this.lowWater = lowWater;
            return this;
        }

        /**
         * Prefetch for named sequences: keep, per name, up to about {@code k} values of a
         * <em>dense</em> sequence to answer later {@link IdgenClient#nextValue(String)} and
         * {@link IdgenClient#nextValues(String, int)} calls from; a call the buffer cannot
         * answer asks for {@code max(k, n)} values (at most the node's max_batch). Strict
         * sequences are never prefetched. Default 0 (off). Values still buffered when the client
         * stops are lost (gaps, up to {@code k} per name), buffers of at most 1024 names are
         * held (least recently used forgotten), and values handed out by two clients
         * interleave.
         */
        public Builder sequencePrefetch(int k) {
            if (k < 0 || k > Frames.MAX_VALUES_PER_CALL) {
                throw new IllegalArgumentException("sequencePrefetch must be in 0 .. " + Frames.MAX_VALUES_PER_CALL);
            }
            this.sequencePrefetch = k;
            return this;
        }

        /** Whether to ask version 2 nodes for runs (GET_RANGES) instead of ID lists. Default true. */
        public Builder useRanges(boolean on) {
            this.useRanges = on;
            return this;
        }

        /** The client; it connects lazily, on its first call. */
        public IdgenClient build() {
            return new IdgenClient(this);
        }

        private static Duration positive(Duration d, String what) {
            if (d == null || d.isNegative() || d.isZero()) {
                throw new IllegalArgumentException(what + " must be positive");
            }
            return d;
        }
    }

    // ---------------------------------------------------------------------------------
    // Public calls

    /** One ID (from the prefetch pool when configured), within the default call deadline. */
    public long nextId() {
        return nextId(callDeadline);
    }

    /** One ID within {@code deadline}. */
    public long nextId(Duration deadline) {
        return await(nextIdAsync(deadline), deadline);
    }

    /** One ID, asynchronously. */
    public CompletableFuture<Long> nextIdAsync() {
        return nextIdAsync(callDeadline);
    }

    /** One ID, asynchronously, within {@code deadline}. */
    public CompletableFuture<Long> nextIdAsync(Duration deadline) {
        if (prefetch != null) {
            return prefetch.next(deadline);
        }
        return nextIdsAsync(1, deadline).thenApply(ids -> ids[0]);
    }

    /** Exactly {@code n} IDs, increasing, from one node (all or nothing). */
    public long[] nextIds(int n) {
        return nextIds(n, callDeadline);
    }

    /** Exactly {@code n} IDs within {@code deadline}. */
    public long[] nextIds(int n, Duration deadline) {
        return await(nextIdsAsync(n, deadline), deadline);
    }

    /** Exactly {@code n} IDs, asynchronously. */
    public CompletableFuture<long[]> nextIdsAsync(int n) {
        return nextIdsAsync(n, callDeadline);
    }

    /**
     * Exactly {@code n} IDs, asynchronously, within {@code deadline}.
     *
     * @throws IllegalArgumentException at once, nothing sent, for an {@code n} outside {@code 1
     *     ..= 16777216} (0 included: no call returns an empty batch)
     */
    public CompletableFuture<long[]> nextIdsAsync(int n, Duration deadline) {
        if (n < 1 || n > MAX_IDS_PER_CALL) {
            throw new IllegalArgumentException("n must be in 1 .. " + MAX_IDS_PER_CALL + ", not " + n);
        }
        return call("ids", n, conn -> conn.getIds(n), deadline);
    }

    // ---- GET_IDS_WITH: after, idempotency keys, masked IDs (protocol version 5) ----

    /** One ID with {@code options} (see {@link #nextIdsAsync(int, IdOptions, Duration)}). */
    public long nextId(IdOptions options) {
        return nextIds(1, options)[0];
    }

    /** Exactly {@code n} IDs with {@code options}, within the default call deadline. */
    public long[] nextIds(int n, IdOptions options) {
        return nextIds(n, options, callDeadline);
    }

    /** Exactly {@code n} IDs with {@code options}, within {@code deadline}. */
    public long[] nextIds(int n, IdOptions options, Duration deadline) {
        return await(nextIdsAsync(n, options, deadline), deadline);
    }

    /**
     * Exactly {@code n} (1 ..= the node's max_batch) IDs, increasing, with {@code options}
     * (protocol version 5: one GET_IDS_WITH, never the prefetch pool), asynchronously, within
     * {@code deadline}. With {@link IdOptions#after()} every ID is greater than it. With an
     * idempotency key the request goes to the one node the key hashes to ({@link
     * #nodeForKey(String)}) and is never retried on another: a failure that another node could
     * have served fails with {@link KeyedRequestFailedException}. The future fails with {@link
     * IdsWithUnsupportedException}, nothing sent and no other node tried, on a node that
     * negotiated a version below 5.
     */
    public CompletableFuture<long[]> nextIdsAsync(int n, IdOptions options, Duration deadline) {
        return idsWith(n, options, false, deadline).thenApply(o -> (long[]) o);
    }

    /** Exactly {@code n} IDs masked by the node, within the default call deadline. */
    public MaskedIds nextMaskedIds(int n, IdOptions options) {
        return nextMaskedIds(n, options, callDeadline);
    }

    /** Exactly {@code n} IDs masked by the node, within {@code deadline}. */
    public MaskedIds nextMaskedIds(int n, IdOptions options, Duration deadline) {
        return await(nextMaskedIdsAsync(n, options, deadline), deadline);
    }

    /**
     * Exactly {@code n} IDs masked by the node with its current masking key (the node needs
     * {@code IDGEN_MASK_KEYS}, else 205 INVALID_OPTION): the key's ID, the masked values and
     * ({@link MaskedIds#strings()}) their 12-character forms. Options, routing and errors as
     * {@link #nextIdsAsync(int, IdOptions, Duration)}.
     */
    public CompletableFuture<MaskedIds> nextMaskedIdsAsync(int n, IdOptions options, Duration deadline) {
        return idsWith(n, options, true, deadline).thenApply(o -> (MaskedIds) o);
    }

    private CompletableFuture<Object> idsWith(int n, IdOptions options, boolean masked, Duration deadline) {
        IdOptions o = options == null ? IdOptions.NONE : options;
        if (n < 1 || n > MAX_IDS_PER_CALL) {
            throw new IllegalArgumentException("n must be in 1 .. " + MAX_IDS_PER_CALL + ", not " + n);
        }
        List<Node> ns = nodes;
        Node pinned = o.key() == null ? null : ns.get(keyNodeIndex(o.key(), ns.size()));
        return call(masked ? "masked_ids" : "ids_with", n, conn -> conn.getIdsWith(n, o, masked), deadline, pinned);
    }

    /**
     * The node ({@code host:port}) a request with idempotency key {@code key} goes to: FNV-1a
     * 64 of the key's bytes, modulo the number of configured nodes, in the order given (with
     * expand: of the nodes the names resolve to now, which a re-resolution may change).
     */
    public String nodeForKey(String key) {
        List<Node> ns = nodes;
        return ns.get(keyNodeIndex(key, ns.size())).address;
    }

    /** FNV-1a 64 of the key's bytes, unsigned, modulo {@code nodeCount}. */
    static int keyNodeIndex(String key, int nodeCount) {
        return (int) Long.remainderUnsigned(fnv1a64(Frames.idempotencyKey(key)), nodeCount);
    }

    /** FNV-1a, 64 bits. */
    static long fnv1a64(byte[] bytes) {
        long h = 0xcbf29ce484222325L;
        for (byte b : bytes) {
            h ^= b & 0xFF;
            h *= 0x100000001b3L;
        }
        return h;
    }

    // ---- Version 7 UUIDs (protocol version 4) ----

    /** One version 7 UUID, within the default call deadline. See {@link #nextUuidsAsync(int, Duration)}. */
    public UUID nextUuid() {
        return nextUuid(callDeadline);
    }

    /** One version 7 UUID within {@code deadline}. */
    public UUID nextUuid(Duration deadline) {
        return await(nextUuidAsync(deadline), deadline);
    }

    /** One version 7 UUID, asynchronously. */
    public CompletableFuture<UUID> nextUuidAsync() {
        return nextUuidAsync(callDeadline);
    }

    /** One version 7 UUID, asynchronously, within {@code deadline}. */
    public CompletableFuture<UUID> nextUuidAsync(Duration deadline) {
        return nextUuidsAsync(1, deadline).thenApply(u -> u[0]);
    }

    /** Exactly {@code n} version 7 UUIDs, strictly increasing, from one node (all or nothing). */
    public UUID[] nextUuids(int n) {
        return nextUuids(n, callDeadline);
    }

    /** Exactly {@code n} version 7 UUIDs within {@code deadline}. */
    public UUID[] nextUuids(int n, Duration deadline) {
        return await(nextUuidsAsync(n, deadline), deadline);
    }

    /** Exactly {@code n} version 7 UUIDs, asynchronously. */
    public CompletableFuture<UUID[]> nextUuidsAsync(int n) {
        return nextUuidsAsync(n, callDeadline);
    }

    /**
     * Exactly {@code n} RFC 9562 version 7 UUIDs as {@link UUID}s, strictly increasing (as
     * 128-bit unsigned numbers, RFC 9562's order: {@link UUID#compareTo} compares signed halves
     * and disagrees once a UUID's top bit is set), from one node, asynchronously, within
     * {@code deadline} (protocol version 4: GET_UUIDS). The node makes each from one ID it
     * issues (the ID's millisecond, then its worker and sequence, then random bits), so they
     * are unique across the cluster as its IDs are; {@link Layout#decodeUuid} takes one apart.
     * Above the node's max_batch the request is split into pipelined frames and joined; failover
     * as for {@link #nextIdsAsync(int, Duration)}. Every answer is checked (count, version 7,
     * variant, increasing on the connection): a {@link ProtocolException} otherwise, and the
     * call fails over. The future fails with {@link UuidsUnsupportedException}, nothing sent and
     * no other node tried, when the node negotiated a version below 4.
     *
     * @throws IllegalArgumentException at once, nothing sent, for an {@code n} outside {@code 1
     *     ..= 16777216}
     */
    public CompletableFuture<UUID[]> nextUuidsAsync(int n, Duration deadline) {
        if (n < 1 || n > MAX_IDS_PER_CALL) {
            throw new IllegalArgumentException("n must be in 1 .. " + MAX_IDS_PER_CALL + ", not " + n);
        }
        return call("uuids", n, conn -> conn.getUuids(n), deadline);
    }

    /** Takes a version 7 UUID apart with {@link #layout()}. */
    public Layout.UuidParts decodeUuid(UUID uuid) {
        return layout().decodeUuid(uuid);
    }

    // ---- Named sequences (protocol version 3) ----

    /** One value of sequence {@code name}, within the default call deadline. */
    public long nextValue(String name) {
        return nextValue(name, callDeadline);
    }

    /** One value of sequence {@code name} within {@code deadline}. */
    public long nextValue(String name, Duration deadline) {
        return await(nextValueAsync(name, deadline), deadline);
    }

    /** One value of sequence {@code name}, asynchronously. */
    public CompletableFuture<Long> nextValueAsync(String name) {
        return nextValueAsync(name, callDeadline);
    }

    /** One value of sequence {@code name}, asynchronously, within {@code deadline}. */
    public CompletableFuture<Long> nextValueAsync(String name, Duration deadline) {
        return nextValuesAsync(name, 1, deadline).thenApply(v -> v[0]);
    }

    /** Exactly {@code n} values of sequence {@code name}, strictly increasing (all or nothing). */
    public long[] nextValues(String name, int n) {
        return nextValues(name, n, callDeadline);
    }

    /** Exactly {@code n} values of sequence {@code name} within {@code deadline}. */
    public long[] nextValues(String name, int n, Duration deadline) {
        return await(nextValuesAsync(name, n, deadline), deadline);
    }

    /** Exactly {@code n} values of sequence {@code name}, asynchronously. */
    public CompletableFuture<long[]> nextValuesAsync(String name, int n) {
        return nextValuesAsync(name, n, callDeadline);
    }

    /**
     * Exactly {@code n} values of sequence {@code name}, strictly increasing, asynchronously,
     * within {@code deadline}; each in {@code 1 ..= 2^63 - 1}. Without prefetch one GET_VALUES
     * of {@code n} is sent; a retry on another node asks again (a value reserved for a lost
     * answer is a gap, never handed out twice).
     *
     * @throws IllegalArgumentException at once, nothing sent, for a name that is not 1 to 64
     *     bytes of {@code a-z}, {@code 0-9}, {@code .}, {@code _} and {@code -} starting with a
     *     letter or a digit, an {@code n} outside {@code 1 ..= 1048576}, or a non-positive
     *     deadline; the future fails with one, nothing sent, for an {@code n} above the node's
     *     {@code max_batch}
     */
    public CompletableFuture<long[]> nextValuesAsync(String name, int n, Duration deadline) {
        byte[] nameBytes = Frames.sequenceName(name);
        Frames.checkValuesCount(n);
        checkDeadline(deadline);
        if (sequencePrefetch != null) {
            if (closed) {
                return CompletableFuture.failedFuture(new ClientClosedException("the client is closed"));
            }
            return sequencePrefetch.next(name, nameBytes, n, deadline);
        }
        return valuesCall(nameBytes, n, n, deadline).thenApply(Frames.Values::values);
    }

    /** One GET_VALUES of {@code n ..= want} values (see {@link Connection#getValues}), with failover. */
    CompletableFuture<Frames.Values> valuesCall(byte[] nameBytes, int n, int want, Duration deadline) {
        return call("values", n, conn -> conn.getValues(nameBytes, n, want), deadline);
    }

    /** The sequence prefetch state, or {@code null} without it; for tests. */
    SequencePrefetch sequencePrefetch() {
        return sequencePrefetch;
    }

    /** PING a node (with failover); the round-trip time. */
    public Duration ping() {
        return await(pingAsync(), callDeadline);
    }

    /** PING a node, asynchronously. */
    public CompletableFuture<Duration> pingAsync() {
        return call("ping", 0, conn -> {
            long start = System.nanoTime();
            return conn.ping(tokens.getAndIncrement()).thenApply(t -> Duration.ofNanos(System.nanoTime() - start));
        }, callDeadline);
    }

    /** The cluster's ID layout (from the first HELLO_OK; connects when needed). */
    public Layout layout() {
        Layout l = layout;
        if (l == null) {
            await(call(null, 0, conn -> CompletableFuture.completedFuture(conn.hello), callDeadline), callDeadline);
            l = layout;
        }
        return l;
    }

    /** Takes an ID apart with {@link #layout()}. */
    public Layout.Parts decode(long id) {
        return layout().decode(id);
    }

    /** The client's counters. */
    public ClientStats stats() {
        Stats s = stats;
        return new ClientStats(s.connects.sum(), s.requests.sum(), s.ids.sum(), s.pings.sum(),
                s.nodeFailures.sum(), s.failovers.sum(), s.rangeChanges.sum(), s.prefetchRefills.sum(),
                s.prefetchServed.sum(), s.valueRequests.sum(), s.values.sum(), s.uuidRequests.sum(),
                s.uuids.sum());
    }

    /** Each node's state, in the order given. */
    public List<NodeInfo> nodes() {
        long now = System.nanoTime();
        List<NodeInfo> out = new ArrayList<>();
        for (Node n : nodes) {
            Connection c = n.conn;
            synchronized (n) {
                long left = Math.max(0, n.downUntil - now);
                out.add(new NodeInfo(n.address, c != null && c.alive(), Duration.ofNanos(n.downUntil == 0 ? 0 : left),
                        n.failures, n.lastError, c != null && c.alive() ? c.hello : null, n == preferredNode(nodes)));
            }
        }
        return out;
    }

    /**
     * Closes every connection and stops the background threads. Calls still waiting fail with
     * {@link ClientClosedException}; IDs in the prefetch pool and values in sequence
     * prefetch buffers are dropped (gaps).
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        if (prefetch != null) {
            prefetch.close();
        }
        if (sequencePrefetch != null) {
            sequencePrefetch.close();
        }
        for (Node n : nodes) {
            Connection c;
            synchronized (n.connectLock) {
                c = n.conn;
                n.conn = null;
            }
            if (c != null) {
                c.close();
            }
        }
        timers.shutdownNow();
        workers.shutdownNow();
    }

    boolean isClosed() {
        return closed;
    }

    Duration callDeadline() {
        return callDeadline;
    }

    ScheduledThreadPoolExecutor timers() {
        return timers;
    }

    // ---------------------------------------------------------------------------------
    // Waiting

    static <T> T await(CompletableFuture<T> f, Duration deadline) {
        try {
            // The call enforces its own deadline; this bound only guards against a bug.
            return f.get(deadline.toMillis() + 5_000, TimeUnit.MILLISECONDS);
        } catch (ExecutionException | CompletionException e) {
            throw rethrow(e.getCause());
        } catch (TimeoutException e) {
            throw new DeadlineExceededException("no answer within " + deadline.toMillis() + " ms", null);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IdgenException("interrupted", null, e);
        } catch (CancellationException e) {
            throw new IdgenException("cancelled", null, e);
        }
    }

    private static RuntimeException rethrow(Throwable t) {
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new IdgenException(String.valueOf(t), null, t);
    }

    static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    // ---------------------------------------------------------------------------------
    // Failover

    private static void checkDeadline(Duration deadline) {
        if (deadline == null || deadline.isNegative() || deadline.isZero()) {
            throw new IllegalArgumentException("the deadline must be positive");
        }
    }

    private <T> CompletableFuture<T> call(String opName, int count, Function<Connection, CompletableFuture<T>> op,
            Duration deadline) {
        return call(opName, count, op, deadline, null);
    }

    /**
     * A call; {@code pinned} non-null: only that node, never another (a keyed request). {@code
     * opName} names it in the request event (null: an internal call, no event).
     */
    private <T> CompletableFuture<T> call(String opName, int count, Function<Connection, CompletableFuture<T>> op,
            Duration deadline, Node pinned) {
        checkDeadline(deadline);
        Call<T> c = new Call<>(opName, op, System.nanoTime() + deadline.toNanos(), pinned);
        CompletableFuture<T> out = c.result;
        if (opName != null && events.wanted("request")) {
            // The caller's future completes after the event is out, so that a caller who sees
            // the result (a blocking call returning) finds its request event already emitted.
            CompletableFuture<T> emitted = new CompletableFuture<>();
            long start = System.nanoTime();
            c.result.whenComplete((v, e) -> {
                try {
                    events.emit("request", "op", opName, "count", count, "node",
                            c.answered == null ? null : c.answered.address,
                            "duration", Duration.ofNanos(System.nanoTime() - start),
                            "outcome", e == null ? "ok" : outcome(unwrap(e)));
                } finally {
                    if (e == null) {
                        emitted.complete(v);
                    } else {
                        emitted.completeExceptionally(unwrap(e));
                    }
                }
            });
            // A caller who cancels its future cancels the call (no further attempts).
            emitted.whenComplete((v, e) -> {
                if (emitted.isCancelled()) {
                    c.result.cancel(false);
                }
            });
            out = emitted;
        }
        if (closed) {
            c.result.completeExceptionally(new ClientClosedException("the client is closed"));
            return out;
        }
        c.next();
        return out;
    }

    /** One call's progress over the nodes. */
    private final class Call<T> {
        final Function<Connection, CompletableFuture<T>> op;
        final long deadline;
        final CompletableFuture<T> result = new CompletableFuture<>();
        final List<Node> order;
        int position;
        final Map<String, Throwable> tried = new LinkedHashMap<>();
        final Set<Node> reconnected = new HashSet<>();
        Node retrySame;
        Node last;
        volatile Node answered;
        Throwable lastError;

        final boolean pinned;
        final String opName;

        Call(String opName, Function<Connection, CompletableFuture<T>> op, long deadline, Node pinned) {
            this.opName = opName;
            this.op = op;
            this.deadline = deadline;
            this.pinned = pinned != null;
            this.order = pinned != null ? List.of(pinned) : new ArrayList<>(order(System.nanoTime()));
        }

        /** Tries the next node: inline when it is connected, else on a worker thread. */
        void next() {
            if (result.isDone()) {
                return;
            }
            if (closed) {
                result.completeExceptionally(new ClientClosedException("the client is closed"));
                return;
            }
            if (System.nanoTime() >= deadline) {
                result.completeExceptionally(new DeadlineExceededException("the call's deadline ran out"
                        + (lastError == null ? "" : "; last error: " + lastError.getMessage()), lastError));
                return;
            }
            Node node;
            if (retrySame != null) {
                node = retrySame;
                retrySame = null;
            } else if (position < order.size() || (!pinned && expand && reresolved())) {
                node = order.get(position++);
                if (!tried.isEmpty()) {
                    stats.failovers.increment();
                    if (last != null) {
                        events.emit("failover", "from", last.address, "to", node.address, "reason",
                                lastError == null ? null : String.valueOf(lastError.getMessage()));
                    }
                }
            } else {
                finish();
                return;
            }
            last = node;
            Connection c = node.conn;
            if (c != null && c.alive()) {
                attempt(node, c);
                return;
            }
            try {
                workers.execute(() -> {
                    Connection conn;
                    try {
                        conn = connection(node, deadline);
                    } catch (RuntimeException e) {
                        failed(node, null, e, false);
                        return;
                    }
                    attempt(node, conn);
                });
            } catch (java.util.concurrent.RejectedExecutionException e) {
                result.completeExceptionally(new ClientClosedException("the client is closed"));
            }
        }

        void attempt(Node node, Connection conn) {
            CompletableFuture<T> f;
            try {
                f = op.apply(conn);
            } catch (RuntimeException e) {
                failed(node, conn, e, true);
                return;
            }
            long now = System.nanoTime();
            long request = requestTimeout.toNanos();
            long left = deadline - now;
            boolean byDeadline = left <= request;
            ScheduledFuture<?> timer = null;
            if (!f.isDone()) {
                try {
                    timer = timers.schedule(() -> {
                        if (f.isDone()) {
                            return;
                        }
                        if (byDeadline) {
                            // The caller's deadline, not the node's fault: the connection stays;
                            // its late answer is matched by position and dropped.
                            f.completeExceptionally(new DeadlineExceededException(
                                    "no answer from " + node.address + " within the call's deadline", null));
                        } else {
                            UnavailableException e = new UnavailableException(
                                    "no answer within " + requestTimeout.toMillis() + " ms", node.address);
                            conn.fail(e);
                            f.completeExceptionally(e);
                        }
                    }, Math.max(left <= request ? left : request, 1), TimeUnit.NANOSECONDS);
                } catch (java.util.concurrent.RejectedExecutionException e) {
                    f.completeExceptionally(new ClientClosedException("the client is closed"));
                }
            }
            ScheduledFuture<?> t = timer;
            f.whenComplete((v, e) -> {
                if (t != null) {
                    t.cancel(false);
                }
                if (e == null) {
                    succeeded(node);
                    result.complete(v);
                } else {
                    failed(node, conn, unwrap(e), false);
                }
            });
        }

        /**
         * With expand, once every node of the order was tried: resolves the names again (at most
         * once a second) and appends the nodes of the list not tried yet. Runs on a worker thread.
         */
        boolean reresolved() {
            if (tried.isEmpty()) {
                return false;
            }
            resolveIfDue(); // or a resolution after a node failed just ran: take its nodes too
            Set<Node> had = new HashSet<>(order);
            for (Node n : nodes) {
                if (!had.contains(n)) {
                    order.add(n);
                }
            }
            return position < order.size();
        }

        void succeeded(Node node) {
            boolean wasDown;
            synchronized (node) {
                wasDown = node.failures > 0;
                node.failures = 0;
                node.downUntil = 0;
                node.lastError = null;
            }
            answered = node;
            preferred = node;
            if (wasDown) {
                events.emit("node_up", "node", node.address, "reason", "answered");
            }
        }

        void failed(Node node, Connection conn, Throwable e, boolean atSubmit) {
            lastError = e;
            if (atSubmit && (e instanceof IllegalArgumentException || e instanceof SequencesUnsupportedException
                    || e instanceof UuidsUnsupportedException || e instanceof IdsWithUnsupportedException)) {
                // Refused before sending (a count above the node's max_batch, a node without
                // named sequences or UUIDs): not the node's failure, and no other node is tried.
                result.completeExceptionally(e);
                return;
            }
            if (closed || e instanceof ClientClosedException) {
                result.completeExceptionally(closed ? new ClientClosedException("the client is closed") : e);
                return;
            }
            if (e instanceof DeadlineExceededException) {
                result.completeExceptionally(e);
                return;
            }
            if (e instanceof ServerException se) {
                events.emit("refused", "node", node.address, "op", opName, "status", se.status(), "status_name",
                        se.statusName(), "message", se.serverMessage());
                if (se.status() == Status.RANGE_CHANGED && reconnected.add(node)) {
                    // The node took another worker range and closed this connection; the node
                    // is fine: reconnect (the new HELLO_OK announces the new range) and retry.
                    stats.rangeChanges.increment();
                    drop(node, conn);
                    retrySame = node;
                    resume();
                    return;
                }
                if (!se.retryElsewhere() && !se.closesConnection()) {
                    // 2xx, EXHAUSTED, SEQUENCE_USED_UP: every node would answer the same.
                    result.completeExceptionally(se);
                    return;
                }
                // "Try another node", or a status that closes the connection (1xx, 5xx): a
                // node failure (clients/vectors/SCENARIOS.md).
                markDown(node, conn, se, !se.closesConnection());
                tried.put(node.address, se);
                resume();
                return;
            }
            if (atSubmit && conn != null && conn.closedIdle() && reconnected.add(node)) {
                // The node closed an idle connection (its idle timeout): not a failure.
                drop(node, conn);
                retrySame = node;
                resume();
                return;
            }
            markDown(node, conn, e, false);
            tried.put(node.address, e);
            resume();
        }

        /** Goes on with the next node off the reader thread (connecting blocks). */
        void resume() {
            try {
                workers.execute(this::next);
            } catch (java.util.concurrent.RejectedExecutionException e) {
                result.completeExceptionally(new ClientClosedException("the client is closed"));
            }
        }

        void finish() {
            if (pinned && tried.size() == 1) {
                Map.Entry<String, Throwable> only = tried.entrySet().iterator().next();
                result.completeExceptionally(new KeyedRequestFailedException(only.getKey(), only.getValue()));
                return;
            }
            if (tried.size() == 1) {
                result.completeExceptionally(tried.values().iterator().next());
                return;
            }
            Map<String, Throwable> all = new LinkedHashMap<>();
            for (Node n : nodes) {
                all.put(n.address, tried.get(n.address));
            }
            for (Map.Entry<String, Throwable> t : tried.entrySet()) {
                all.putIfAbsent(t.getKey(), t.getValue()); // a node dropped since (expand)
            }
            result.completeExceptionally(new NoNodeAvailableException(all));
        }
    }

    /** Healthy nodes from the preferred one on, then nodes backing off, soonest back first. */
    private List<Node> order(long now) {
        List<Node> ns = nodes;
        Node p = preferred;
        int start = p == null ? 0 : Math.max(0, ns.indexOf(p));
        List<Node> up = new ArrayList<>();
        List<Node> down = new ArrayList<>();
        Map<Node, Long> until = new java.util.IdentityHashMap<>();
        for (int k = 0; k < ns.size(); k++) {
            Node n = ns.get((start + k) % ns.size());
            long u;
            synchronized (n) {
                u = n.downUntil;
            }
            until.put(n, u);
            (u > now ? down : up).add(n);
        }
        down.sort(Comparator.comparingLong(until::get));
        up.addAll(down);
        return up;
    }

    /** The node calls go to first: the one that answered last, else the first. */
    private Node preferredNode(List<Node> ns) {
        Node p = preferred;
        return p != null && ns.contains(p) ? p : ns.get(0);
    }

    private static String outcome(Throwable e) {
        if (e instanceof ServerException se) {
            String n = se.statusName();
            return n != null ? n : "status " + se.status();
        }
        return e.getClass().getSimpleName();
    }

    // ---------------------------------------------------------------------------------
    // Names expanded to their addresses

    private static java.net.InetAddress[] resolveName(String host) {
        try {
            return java.net.InetAddress.getAllByName(host);
        } catch (java.net.UnknownHostException e) {
            return new java.net.InetAddress[0];
        }
    }

    /**
     * The node list for the names as they resolve now: the configured entries in order, each
     * replaced by its addresses (resolver's order, duplicates removed; an IP literal stays
     * itself; a name that resolves to nothing stays one node, which fails to connect). Nodes of
     * {@code old} are kept where their address still appears; those that are gone stay while
     * their connection lives (marked gone, dropped when it fails). Caller holds resolveLock.
     */
    private List<Node> resolved(List<Node> old) {
        Map<String, Node> byAddress = new LinkedHashMap<>();
        for (Node n : old) {
            byAddress.put(n.address + "/" + n.host, n);
        }
        Map<String, Node> next = new LinkedHashMap<>();
        Set<String> seenAddresses = new HashSet<>();
        for (Node e : entries) {
            java.net.InetAddress[] addrs = TlsConfig.isIpLiteral(e.host) ? null : resolver.apply(e.host);
            if (addrs == null || addrs.length == 0) {
                if (seenAddresses.add(e.address)) {
                    Node keep = byAddress.get(e.address + "/" + e.host);
                    next.put(e.address + "/" + e.host, keep != null ? keep : e);
                }
                continue;
            }
            for (java.net.InetAddress a : addrs) {
                Node fresh = new Node(e, a);
                if (!seenAddresses.add(fresh.address)) {
                    continue;
                }
                String k = fresh.address + "/" + fresh.host;
                Node keep = byAddress.get(k);
                if (keep != null) {
                    keep.gone = false;
                }
                next.put(k, keep != null ? keep : fresh);
            }
        }
        for (Map.Entry<String, Node> o : byAddress.entrySet()) {
            Node n = o.getValue();
            if (next.containsValue(n)) {
                continue;
            }
            Connection c = n.conn;
            boolean down;
            synchronized (n) {
                down = n.downUntil > System.nanoTime();
            }
            if (c != null && c.alive() && !down) {
                n.gone = true;
                next.put(o.getKey(), n);
            } else if (c != null) {
                drop(n, c);
            }
        }
        return List.copyOf(next.values());
    }

    /** With expand: resolves again unless that happened less than a second ago; whether it did. */
    private boolean resolveIfDue() {
        synchronized (resolveLock) {
            long now = System.nanoTime();
            if (now - lastResolve < 1_000_000_000L) {
                return false;
            }
            lastResolve = now;
            nodes = resolved(nodes);
            return true;
        }
    }

    /** A gone node (its name no longer resolves to it) whose connection failed leaves the list. */
    private void dropIfGone(Node node) {
        if (!node.gone) {
            return;
        }
        synchronized (resolveLock) {
            List<Node> ns = new ArrayList<>(nodes);
            if (ns.size() > 1 && ns.remove(node)) {
                nodes = List.copyOf(ns);
            }
        }
    }

    private Connection connection(Node node, long deadline) {
        Connection c = node.conn;
        if (c != null && c.alive()) {
            return c;
        }
        synchronized (node.connectLock) {
            if (closed) {
                throw new ClientClosedException("the client is closed");
            }
            c = node.conn;
            if (c != null && c.alive()) {
                return c;
            }
            long left = (deadline - System.nanoTime()) / 1_000_000L;
            long timeout = Math.max(1, Math.min(connectTimeout.toMillis(), left));
            long start = System.nanoTime();
            try {
                c = Connection.open(node.address, node.host, node.fixed, node.port, tls, timeout, useRanges, stats);
                try {
                    checkLayout(c);
                } catch (RuntimeException e) {
                    c.close();
                    throw e;
                }
            } catch (RuntimeException e) {
                events.emit("connect_failed", "node", node.address, "error", String.valueOf(e.getMessage()), "duration",
                        Duration.ofNanos(System.nanoTime() - start));
                throw e;
            }
            events.emit("connect", "node", node.address, "address", c.remoteAddress(), "version", c.hello.version(),
                    "duration", Duration.ofNanos(System.nanoTime() - start));
            node.conn = c;
            if (closed) {
                c.close();
                throw new ClientClosedException("the client is closed");
            }
            return c;
        }
    }

    private synchronized void checkLayout(Connection c) {
        Layout l = c.hello.layout();
        if (layout == null) {
            layout = l;
        } else if (!layout.equals(l)) {
            throw new ProtocolException("node's ID layout " + l + " differs from the cluster's " + layout, 0, c.node);
        }
    }

    private void drop(Node node, Connection conn) {
        synchronized (node.connectLock) {
            if (conn != null && node.conn == conn) {
                node.conn = null;
            }
        }
        if (conn != null) {
            conn.fail(new UnavailableException("connection dropped", node.address));
        }
    }

    /**
     * Backs a node off. Only the first report of one failure counts: reports about an older
     * connection, or while the node is backing off already, do not extend it.
     */
    private void markDown(Node node, Connection conn, Throwable err, boolean keepConnection) {
        long now = System.nanoTime();
        boolean dropIt = false;
        boolean marked = false;
        synchronized (node) {
            Connection current = node.conn;
            boolean stale = conn != null && current != null && current != conn;
            if (stale || node.downUntil > now) {
                if (node.lastError == null) {
                    node.lastError = err;
                }
            } else {
                node.failures++;
                long delay = backoffMin.toNanos() << Math.min(node.failures - 1, 30);
                if (delay <= 0 || delay > backoffMax.toNanos()) {
                    delay = backoffMax.toNanos();
                }
                node.downUntil = now + delay;
                node.lastError = err;
                stats.nodeFailures.increment();
                marked = true;
            }
            if (!keepConnection && conn != null) {
                dropIt = true;
            }
        }
        if (dropIt) {
            drop(node, conn);
        }
        if (marked) {
            events.emit("node_down", "node", node.address, "reason", String.valueOf(err.getMessage()));
            if (expand) {
                // A node failed: look at the names again (at most once a second), off this thread.
                try {
                    workers.execute(this::resolveIfDue);
                } catch (java.util.concurrent.RejectedExecutionException closing) {
                    // the client is closing
                }
            }
        }
        dropIfGone(node);
    }

    @Override
    public String toString() {
        return "IdgenClient" + Arrays.toString(nodes.stream().map(n -> n.address).toArray());
    }
}
