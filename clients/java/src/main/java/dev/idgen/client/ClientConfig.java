package dev.idgen.client;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * A client's connection settings from an {@code idgen://} / {@code idgens://} URL or from the
 * environment ({@code IDGEN_NODES} and {@code IDGEN_CLIENT_*}), as {@code
 * clients/vectors/CONFIG.md} defines them. Parsing never connects and never reads a file; bad
 * input is an {@link IllegalArgumentException} that names what is wrong.
 *
 * <pre>{@code
 * ClientConfig c = ClientConfig.parseUrl("idgens://n1:7420,n2:7420?ca=/etc/idgen/ca.crt&timeout_ms=500");
 * IdgenClient client = IdgenClient.builder().config(c).prefetch(1000).build();
 * }</pre>
 */
public final class ClientConfig {
    /** The longest timeout a URL or the environment may give, in milliseconds (one hour). */
    public static final long MAX_TIMEOUT_MS = 3_600_000L;

    static final String ENV_NODES = "IDGEN_NODES";
    static final String ENV_CA = "IDGEN_CLIENT_CA";
    static final String ENV_CERT = "IDGEN_CLIENT_CERT";
    static final String ENV_KEY = "IDGEN_CLIENT_KEY";
    static final String ENV_SERVER_NAME = "IDGEN_CLIENT_SERVER_NAME";
    static final String ENV_CONNECT_TIMEOUT_MS = "IDGEN_CLIENT_CONNECT_TIMEOUT_MS";
    static final String ENV_TIMEOUT_MS = "IDGEN_CLIENT_TIMEOUT_MS";
    private static final List<String> CLIENT_VARS =
            List.of(ENV_CA, ENV_CERT, ENV_KEY, ENV_SERVER_NAME, ENV_CONNECT_TIMEOUT_MS, ENV_TIMEOUT_MS);
    private static final Set<String> PARAMS =
            Set.of("ca", "cert", "key", "server_name", "connect_timeout_ms", "timeout_ms", "expand");

    private final String source;
    private final List<String> nodes;
    private final boolean tls;
    private final String ca;
    private final String cert;
    private final String key;
    private final String serverName;
    private final Long connectTimeoutMs;
    private final Long timeoutMs;
    private final Boolean expand; // null: not given

    private ClientConfig(String source, List<String> nodes, boolean tls, String ca, String cert, String key,
            String serverName, Long connectTimeoutMs, Long timeoutMs, Boolean expand) {
        this.source = source;
        this.nodes = List.copyOf(nodes);
        this.tls = tls;
        this.ca = ca;
        this.cert = cert;
        this.key = key;
        this.serverName = serverName;
        this.connectTimeoutMs = connectTimeoutMs;
        this.timeoutMs = timeoutMs;
        this.expand = expand;
    }

    /** The nodes, {@code host:port} (IPv6 as {@code [::1]:7420}, default port filled in), in the order given. */
    public List<String> nodes() {
        return nodes;
    }

    /** Whether the nodes are reached over TLS ({@code idgens://}, or an {@code IDGEN_CLIENT_*} TLS variable). */
    public boolean tls() {
        return tls;
    }

    /** The CA bundle file, or {@code null} (TLS then verifies against the system's roots). */
    public String ca() {
        return ca;
    }

    /** The client certificate file for mutual TLS, or {@code null}. */
    public String cert() {
        return cert;
    }

    /** The client key file for mutual TLS, or {@code null}. */
    public String key() {
        return key;
    }

    /** The name TLS verifies and sends as SNI instead of each node's host, or {@code null}. */
    public String serverName() {
        return serverName;
    }

    /** The connect timeout in milliseconds, or {@code null} for the client's default. */
    public Long connectTimeoutMs() {
        return connectTimeoutMs;
    }

    /** The request timeout in milliseconds, or {@code null} for the client's default. */
    public Long timeoutMs() {
        return timeoutMs;
    }

    /** Whether each address a node's name resolves to is a node of its own. */
    public boolean expand() {
        return Boolean.TRUE.equals(expand);
    }

    /** Whether the URL gave {@code expand} (either value). */
    boolean expandGiven() {
        return expand != null;
    }

    /** Where the settings came from ("the URL", "IDGEN_NODES", ...), for messages. */
    String source() {
        return source;
    }

    /**
     * The TLS settings these files and name make ({@code null} without TLS). Reads the files.
     *
     * @throws IllegalArgumentException when a file is missing or unusable
     */
    public TlsConfig tlsConfig() {
        if (!tls) {
            return null;
        }
        TlsConfig.Builder b = TlsConfig.builder();
        if (ca != null) {
            b.caFile(Path.of(ca));
        } else {
            b.systemRoots();
        }
        if (cert != null) {
            b.clientCertFiles(Path.of(cert), Path.of(key));
        }
        if (serverName != null) {
            b.serverName(serverName);
        }
        return b.build();
    }

    @Override
    public String toString() {
        return "ClientConfig[nodes=" + nodes + ", tls=" + tls + ", ca=" + ca + ", cert=" + cert + ", key=" + key
                + ", serverName=" + serverName + ", connectTimeoutMs=" + connectTimeoutMs + ", timeoutMs=" + timeoutMs
                + ", expand=" + expand() + "]";
    }

    // ---------------------------------------------------------------------------------
    // The URL

    /**
     * Parses {@code idgen://NODES[/][?PARAMS]} (plain TCP) or {@code idgens://...} (TLS).
     * Parameters: {@code ca}, {@code cert}, {@code key}, {@code server_name} (idgens only),
     * {@code connect_timeout_ms}, {@code timeout_ms} (1 ..= 3600000) and {@code expand}
     * ({@code true}/{@code false}); values percent-decoded ({@code +} is a plus).
     *
     * @throws IllegalArgumentException naming what is wrong with the URL
     */
    public static ClientConfig parseUrl(String url) {
        Objects.requireNonNull(url, "url");
        int sep = url.indexOf("://");
        if (sep < 0) {
            throw bad(url, "not a URL: it must start with idgen:// or idgens://");
        }
        String scheme = url.substring(0, sep);
        boolean tls;
        if (scheme.equals("idgen")) {
            tls = false;
        } else if (scheme.equals("idgens")) {
            tls = true;
        } else if (scheme.equalsIgnoreCase("idgen") || scheme.equalsIgnoreCase("idgens")) {
            throw bad(url, "the scheme must be lower case (" + scheme.toLowerCase(java.util.Locale.ROOT) + "://)");
        } else {
            throw bad(url, "the scheme " + scheme + ":// is not idgen:// or idgens://");
        }
        String rest = url.substring(sep + 3);
        if (rest.indexOf('#') >= 0) {
            throw bad(url, "a URL has no fragment (#...)");
        }
        String query = null;
        int q = rest.indexOf('?');
        if (q >= 0) {
            query = rest.substring(q + 1);
            rest = rest.substring(0, q);
        }
        int slash = rest.indexOf('/');
        if (slash >= 0) {
            String path = rest.substring(slash);
            if (!path.equals("/")) {
                throw bad(url, "a URL has no path (" + path + "); only a trailing / is allowed");
            }
            rest = rest.substring(0, slash);
        }
        if (rest.indexOf('@') >= 0) {
            throw bad(url, "a URL holds no user info (user@): give a client certificate with cert= and key=");
        }
        if (rest.isEmpty()) {
            throw bad(url, "no node");
        }
        List<String> nodes;
        try {
            nodes = nodeList(rest, false);
        } catch (IllegalArgumentException e) {
            throw bad(url, e.getMessage());
        }
        Map<String, String> params = new LinkedHashMap<>();
        if (query != null) {
            if (query.isEmpty()) {
                throw bad(url, "an empty query (?)");
            }
            for (String pair : query.split("&", -1)) {
                int eq = pair.indexOf('=');
                if (eq < 0) {
                    throw bad(url, "parameter " + pair + " has no value (name=value)");
                }
                String name = pair.substring(0, eq);
                if (!PARAMS.contains(name)) {
                    throw bad(url, "unknown parameter " + name + " (known: ca, cert, key, server_name, "
                            + "connect_timeout_ms, timeout_ms, expand)");
                }
                if (params.containsKey(name)) {
                    throw bad(url, "parameter " + name + " is given twice");
                }
                String value;
                try {
                    value = percentDecode(pair.substring(eq + 1));
                } catch (IllegalArgumentException e) {
                    throw bad(url, "parameter " + name + ": " + e.getMessage());
                }
                if (value.isEmpty()) {
                    throw bad(url, "parameter " + name + " is empty");
                }
                params.put(name, value);
            }
        }
        if (!tls) {
            for (String p : List.of("ca", "cert", "key", "server_name")) {
                if (params.containsKey(p)) {
                    throw bad(url, "parameter " + p + " is a TLS setting: use idgens://");
                }
            }
        }
        String cert = params.get("cert");
        String key = params.get("key");
        if ((cert == null) != (key == null)) {
            throw bad(url, cert != null ? "cert without key (mutual TLS needs both)" : "key without cert (mutual TLS needs both)");
        }
        Boolean expand = null;
        String e = params.get("expand");
        if (e != null) {
            if (e.equals("true") || e.equals("false")) {
                expand = Boolean.valueOf(e);
            } else {
                throw bad(url, "expand must be true or false, not " + e);
            }
        }
        Long connect;
        Long timeout;
        try {
            connect = timeout(params.get("connect_timeout_ms"), "connect_timeout_ms");
            timeout = timeout(params.get("timeout_ms"), "timeout_ms");
        } catch (IllegalArgumentException x) {
            throw bad(url, x.getMessage());
        }
        return new ClientConfig("the URL", nodes, tls, params.get("ca"), cert, key, params.get("server_name"), connect,
                timeout, expand);
    }

    private static IllegalArgumentException bad(String url, String what) {
        return new IllegalArgumentException("bad idgen URL " + url + ": " + what);
    }

    private static String percentDecode(String s) {
        if (s.indexOf('%') < 0) {
            return s;
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        for (int i = 0; i < b.length; i++) {
            if (b[i] == '%') {
                if (i + 2 >= b.length || Character.digit(b[i + 1], 16) < 0 || Character.digit(b[i + 2], 16) < 0) {
                    throw new IllegalArgumentException("a % not followed by two hex digits");
                }
                out.write(Character.digit(b[i + 1], 16) * 16 + Character.digit(b[i + 2], 16));
                i += 2;
            } else {
                out.write(b[i]);
            }
        }
        return out.toString(StandardCharsets.UTF_8);
    }

    private static Long timeout(String v, String name) {
        if (v == null) {
            return null;
        }
        long ms;
        if (!v.matches("[0-9]{1,10}")) {
            throw new IllegalArgumentException(name + " must be an integer number of milliseconds in 1 ..= "
                    + MAX_TIMEOUT_MS + ", not " + v);
        }
        ms = Long.parseLong(v);
        if (ms < 1 || ms > MAX_TIMEOUT_MS) {
            throw new IllegalArgumentException(name + " must be in 1 ..= " + MAX_TIMEOUT_MS + " ms, not " + v);
        }
        return ms;
    }

    /** Nodes separated by commas; {@code trim}: spaces around entries ignored. */
    static List<String> nodeList(String text, boolean trim) {
        List<String> out = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        String[] entries = text.split(",", -1);
        for (int i = 0; i < entries.length; i++) {
            String entry = trim ? entries[i].strip() : entries[i];
            if (entry.isEmpty()) {
                throw new IllegalArgumentException("entry " + (i + 1) + " of the node list is empty");
            }
            String node = node(entry);
            if (!seen.add(node)) {
                throw new IllegalArgumentException("node " + node + " is listed twice");
            }
            out.add(node);
        }
        return out;
    }

    /** One {@code host[:port]} or {@code [v6][:port]}, as {@code host:port} / {@code [v6]:port}. */
    static String node(String entry) {
        String host;
        String port;
        if (entry.startsWith("[")) {
            int close = entry.indexOf(']');
            if (close < 0) {
                throw new IllegalArgumentException("node " + entry + ": unclosed [ of an IPv6 address");
            }
            host = entry.substring(1, close);
            String after = entry.substring(close + 1);
            if (after.isEmpty()) {
                port = null;
            } else if (after.startsWith(":")) {
                port = after.substring(1);
            } else {
                throw new IllegalArgumentException("node " + entry + ": only :port may follow ]");
            }
            if (host.isEmpty() || host.indexOf(':') < 0) {
                throw new IllegalArgumentException("node " + entry + ": [ ] must hold an IPv6 address");
            }
            host = "[" + host + "]";
        } else {
            int colon = entry.indexOf(':');
            if (colon >= 0 && entry.indexOf(':', colon + 1) >= 0) {
                throw new IllegalArgumentException("node " + entry + ": write an IPv6 address in brackets ([::1]:7420)");
            }
            host = colon < 0 ? entry : entry.substring(0, colon);
            port = colon < 0 ? null : entry.substring(colon + 1);
            if (host.isEmpty()) {
                throw new IllegalArgumentException("node " + entry + " has no host");
            }
            for (int i = 0; i < host.length(); i++) {
                char c = host.charAt(i);
                if (c <= ' ' || c == '[' || c == ']' || c == '/' || c == '?' || c == '#' || c == '@' || c == '%') {
                    throw new IllegalArgumentException("node " + entry + ": the host holds '" + c + "'");
                }
            }
        }
        int p = IdgenClient.DEFAULT_PORT;
        if (port != null) {
            if (port.isEmpty()) {
                throw new IllegalArgumentException("node " + entry + ": empty port after ':'");
            }
            if (!port.matches("[0-9]{1,6}")) {
                throw new IllegalArgumentException("node " + entry + ": the port " + port + " is not a number in 1 ..= 65535");
            }
            p = Integer.parseInt(port);
            if (p < 1 || p > 65535) {
                throw new IllegalArgumentException("node " + entry + ": the port " + port + " is not in 1 ..= 65535");
            }
        }
        return host + ":" + p;
    }

    // ---------------------------------------------------------------------------------
    // The environment

    /**
     * The settings of this process's environment: {@code IDGEN_NODES} (a URL, or a plain list
     * {@code host:port,host:port}) and, with a plain list only, {@code IDGEN_CLIENT_CA},
     * {@code IDGEN_CLIENT_CERT}, {@code IDGEN_CLIENT_KEY}, {@code IDGEN_CLIENT_SERVER_NAME}
     * (any of them turns TLS on), {@code IDGEN_CLIENT_CONNECT_TIMEOUT_MS} and {@code
     * IDGEN_CLIENT_TIMEOUT_MS}. An empty variable is unset.
     *
     * @throws IllegalArgumentException naming the variable and what is wrong
     */
    public static ClientConfig fromEnv() {
        return fromEnv(System.getenv());
    }

    /** {@link #fromEnv()} over these variables instead of the process's (every other one unset). */
    public static ClientConfig fromEnv(Map<String, String> env) {
        Objects.requireNonNull(env, "env");
        String nodes = get(env, ENV_NODES);
        if (nodes == null) {
            throw new IllegalArgumentException(ENV_NODES + " is not set (or empty): give the nodes as "
                    + "host:port,host:port or an idgen:// URL");
        }
        List<String> set = new ArrayList<>();
        for (String v : CLIENT_VARS) {
            if (get(env, v) != null) {
                set.add(v);
            }
        }
        if (nodes.strip().contains("://")) {
            if (!set.isEmpty()) {
                throw new IllegalArgumentException(ENV_NODES + " is a URL, so " + String.join(", ", set)
                        + " must not be set: give every setting in the URL (each setting has one source)");
            }
            ClientConfig c;
            try {
                c = parseUrl(nodes.strip());
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(ENV_NODES + ": " + e.getMessage(), e);
            }
            return new ClientConfig(ENV_NODES, c.nodes, c.tls, c.ca, c.cert, c.key, c.serverName, c.connectTimeoutMs,
                    c.timeoutMs, c.expand);
        }
        List<String> list;
        try {
            list = nodeList(nodes, true);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(ENV_NODES + ": " + e.getMessage(), e);
        }
        String ca = get(env, ENV_CA);
        String cert = get(env, ENV_CERT);
        String key = get(env, ENV_KEY);
        String serverName = get(env, ENV_SERVER_NAME);
        if ((cert == null) != (key == null)) {
            throw new IllegalArgumentException(cert != null ? ENV_CERT + " is set without " + ENV_KEY + " (mutual TLS needs both)"
                    : ENV_KEY + " is set without " + ENV_CERT + " (mutual TLS needs both)");
        }
        boolean tls = ca != null || cert != null || serverName != null;
        Long connect;
        Long timeout;
        try {
            connect = timeout(get(env, ENV_CONNECT_TIMEOUT_MS), ENV_CONNECT_TIMEOUT_MS);
            timeout = timeout(get(env, ENV_TIMEOUT_MS), ENV_TIMEOUT_MS);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(e.getMessage(), e);
        }
        return new ClientConfig("the environment", list, tls, ca, cert, key, serverName, connect, timeout, null);
    }

    private static String get(Map<String, String> env, String name) {
        String v = env.get(name);
        return v == null || v.isEmpty() ? null : v;
    }
}
