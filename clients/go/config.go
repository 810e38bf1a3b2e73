package idgen

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is a client configuration read from an idgen URL (ParseURL) or from the
// environment (ConfigFromEnv), as clients/vectors/CONFIG.md defines them. Config.Options
// turns it into Options; NewClientFromURL and NewClientFromEnv do both steps.
type Config struct {
	// Nodes are "host:port" ("[v6]:port" for an IPv6 literal), default port 7420 filled in,
	// in the order given.
	Nodes []string
	// TLS: idgens://, or any IDGEN_CLIENT_CA/CERT/KEY/SERVER_NAME set.
	TLS bool
	// CA is the PEM file of the nodes' authority ("": the system roots); Cert and Key a
	// client certificate and its key for mutual TLS (both or neither); ServerName the name
	// TLS verifies and sends as SNI instead of each node's host.
	CA, Cert, Key, ServerName string
	// ConnectTimeout and RequestTimeout: 0 when not given (the client's defaults).
	ConnectTimeout, RequestTimeout time.Duration
	// Expand: each address a node's name resolves to is a node of its own (Options.Expand).
	Expand bool

	fromURL   bool // a URL, whose scheme says whether TLS is on
	expandSet bool // expand= was given
}

// maxConfigTimeoutMs is the largest timeout a URL or the environment may give (one hour).
const maxConfigTimeoutMs = 3600000

func configError(format string, args ...any) error {
	return argError("configuration: "+format, args...)
}

// ParseURL parses idgen://NODES[/][?PARAMS] (plain TCP) or idgens://NODES[/][?PARAMS]
// (TLS), NODES = host[:port] or [v6]:port separated by commas, PARAMS among ca, cert, key,
// server_name (idgens only), connect_timeout_ms, timeout_ms and expand. Anything else is an
// error (ErrInvalidArgument) naming what is wrong; nothing is resolved or connected.
func ParseURL(raw string) (Config, error) {
	var cfg Config
	cfg.fromURL = true
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return cfg, configError("%q is not an idgen URL (idgen://host:port or idgens://host:port)", raw)
	}
	switch scheme {
	case "idgen":
	case "idgens":
		cfg.TLS = true
	default:
		if l := strings.ToLower(scheme); l == "idgen" || l == "idgens" {
			return cfg, configError("URL scheme %q must be lower case (%s://)", scheme, l)
		}
		return cfg, configError("URL scheme %q: must be idgen:// (plain) or idgens:// (TLS)", scheme)
	}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return cfg, configError("URL has a fragment (%q): not allowed", rest[i:])
	}
	query := ""
	hasQuery := false
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, query, hasQuery = rest[:i], rest[i+1:], true
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		if path := rest[i:]; path != "/" {
			return cfg, configError("URL path %q: only an empty path or / is allowed", path)
		}
		rest = rest[:i]
	}
	if strings.Contains(rest, "@") {
		return cfg, configError("URL has user info (%q): not allowed (a URL holds no secrets; the key is a file)", rest)
	}
	if rest == "" {
		return cfg, configError("URL %q names no node", raw)
	}
	nodes, err := parseNodeList(strings.Split(rest, ","), false)
	if err != nil {
		return cfg, err
	}
	cfg.Nodes = nodes
	if hasQuery {
		if err := cfg.parseParams(query); err != nil {
			return cfg, err
		}
	}
	if err := cfg.check(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func (cfg *Config) parseParams(query string) error {
	seen := map[string]bool{}
	for _, p := range strings.Split(query, "&") {
		name, value, ok := strings.Cut(p, "=")
		if !ok {
			if p == "" {
				return configError("URL parameters: an empty parameter (a stray '&' or '?')")
			}
			return configError("URL parameter %q has no value (name=value)", p)
		}
		if seen[name] {
			return configError("URL parameter %q is given twice", name)
		}
		seen[name] = true
		v, err := url.PathUnescape(value) // percent-decoding; '+' stays a plus
		if err != nil {
			return configError("URL parameter %s: bad percent-encoding in %q", name, value)
		}
		switch name {
		case "ca", "cert", "key", "server_name":
			if !cfg.TLS {
				return configError("URL parameter %s is a TLS setting: use idgens://", name)
			}
			if v == "" {
				return configError("URL parameter %s is empty", name)
			}
			switch name {
			case "ca":
				cfg.CA = v
			case "cert":
				cfg.Cert = v
			case "key":
				cfg.Key = v
			case "server_name":
				cfg.ServerName = v
			}
		case "connect_timeout_ms", "timeout_ms":
			d, err := parseTimeoutMs(name, v)
			if err != nil {
				return err
			}
			if name == "timeout_ms" {
				cfg.RequestTimeout = d
			} else {
				cfg.ConnectTimeout = d
			}
		case "expand":
			switch v {
			case "true":
				cfg.Expand = true
			case "false":
				cfg.Expand = false
			default:
				return configError("URL parameter expand=%q: must be true or false", v)
			}
			cfg.expandSet = true
		default:
			return configError("unknown URL parameter %q (known: ca, cert, key, server_name, connect_timeout_ms, timeout_ms, expand)", name)
		}
	}
	return nil
}

// parseTimeoutMs parses integer milliseconds in 1..=3600000.
func parseTimeoutMs(name, v string) (time.Duration, error) {
	if v == "" {
		return 0, configError("%s is empty: integer milliseconds in 1..=%d", name, maxConfigTimeoutMs)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, configError("%s=%q: must be integer milliseconds in 1..=%d", name, v, maxConfigTimeoutMs)
		}
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 1 || ms > maxConfigTimeoutMs {
		return 0, configError("%s=%s: must be in 1..=%d milliseconds", name, v, maxConfigTimeoutMs)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// parseNodeList parses entries host[:port] / [v6][:port]; trim: spaces around entries are
// ignored (the plain list of IDGEN_NODES).
func parseNodeList(entries []string, trim bool) ([]string, error) {
	var nodes []string
	seen := map[string]bool{}
	for i, e := range entries {
		if trim {
			e = strings.TrimSpace(e)
		}
		if e == "" {
			return nil, configError("node list: entry %d of %d is empty", i+1, len(entries))
		}
		n, err := parseNodeEntry(e)
		if err != nil {
			return nil, err
		}
		if seen[n] {
			return nil, configError("node %s is listed twice", n)
		}
		seen[n] = true
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// parseNodeEntry normalises host[:port] or [v6][:port] to host:port / [v6]:port.
func parseNodeEntry(e string) (string, error) {
	var host, port string
	hasPort := false
	if strings.HasPrefix(e, "[") {
		end := strings.IndexByte(e, ']')
		if end < 0 {
			return "", configError("node %q: unclosed '[' (an IPv6 literal is [v6]:port)", e)
		}
		host = e[1:end]
		after := e[end+1:]
		switch {
		case after == "":
		case after[0] == ':':
			port, hasPort = after[1:], true
		default:
			return "", configError("node %q: expected ':port' after ']'", e)
		}
		addr := host
		if i := strings.IndexByte(addr, '%'); i >= 0 {
			addr = addr[:i]
		}
		if ip := net.ParseIP(addr); ip == nil || ip.To4() != nil {
			return "", configError("node %q: %q in brackets is not an IPv6 address", e, host)
		}
	} else {
		switch strings.Count(e, ":") {
		case 0:
			host = e
		case 1:
			host, port, _ = strings.Cut(e, ":")
			hasPort = true
		default:
			return "", configError("node %q: an IPv6 address goes in brackets ([v6]:port)", e)
		}
		if strings.ContainsAny(host, "[]/ \t") {
			return "", configError("node %q: %q is not a host name or address", e, host)
		}
	}
	if host == "" {
		return "", configError("node %q has no host", e)
	}
	p := DefaultPort
	if hasPort {
		if port == "" {
			return "", configError("node %q: empty port (give 1..65535 or leave out ':' for %d)", e, DefaultPort)
		}
		for i := 0; i < len(port); i++ {
			if port[i] < '0' || port[i] > '9' {
				return "", configError("node %q: port %q is not a number", e, port)
			}
		}
		v, err := strconv.Atoi(port)
		if err != nil || v < 1 || v > 65535 {
			return "", configError("node %q: port %s is not in 1..65535", e, port)
		}
		p = v
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// check applies the rules common to the URL and the environment.
func (cfg *Config) check() error {
	if (cfg.Cert == "") != (cfg.Key == "") {
		if cfg.Cert != "" {
			return configError("a client certificate (cert) without its key (key): mutual TLS needs both")
		}
		return configError("a client key (key) without its certificate (cert): mutual TLS needs both")
	}
	return nil
}

// ConfigFromEnv reads the configuration from IDGEN_NODES (a URL as ParseURL's, or a plain
// list host:port,host:port) and, with a plain list only, IDGEN_CLIENT_CA,
// IDGEN_CLIENT_CERT, IDGEN_CLIENT_KEY, IDGEN_CLIENT_SERVER_NAME (any of them turns TLS on),
// IDGEN_CLIENT_CONNECT_TIMEOUT_MS and IDGEN_CLIENT_TIMEOUT_MS. An empty variable is unset.
func ConfigFromEnv() (Config, error) {
	return ConfigFromLookup(os.LookupEnv)
}

// clientEnv are the IDGEN_CLIENT_* variables, in the order errors name them.
var clientEnv = []string{
	"IDGEN_CLIENT_CA", "IDGEN_CLIENT_CERT", "IDGEN_CLIENT_KEY", "IDGEN_CLIENT_SERVER_NAME",
	"IDGEN_CLIENT_CONNECT_TIMEOUT_MS", "IDGEN_CLIENT_TIMEOUT_MS",
}

// ConfigFromLookup is ConfigFromEnv reading the variables through lookup (os.LookupEnv's
// signature), for tests and for programs that keep their settings elsewhere.
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	get := func(name string) string {
		v, _ := lookup(name)
		return v
	}
	nodes := get("IDGEN_NODES")
	if strings.TrimSpace(nodes) == "" {
		return Config{}, configError("IDGEN_NODES is not set or empty (a URL idgen://host:port, or host:port,host:port)")
	}
	var set []string
	for _, name := range clientEnv {
		if get(name) != "" {
			set = append(set, name)
		}
	}
	if strings.Contains(nodes, "://") {
		if len(set) > 0 {
			return Config{}, configError("IDGEN_NODES is a URL and %s is set too: give each setting in one place (the URL's parameters)", strings.Join(set, ", "))
		}
		cfg, err := ParseURL(strings.TrimSpace(nodes))
		if err != nil {
			return Config{}, fmt.Errorf("IDGEN_NODES: %w", err)
		}
		return cfg, nil
	}
	list, err := parseNodeList(strings.Split(nodes, ","), true)
	if err != nil {
		return Config{}, fmt.Errorf("IDGEN_NODES: %w", err)
	}
	cfg := Config{Nodes: list,
		CA: get("IDGEN_CLIENT_CA"), Cert: get("IDGEN_CLIENT_CERT"), Key: get("IDGEN_CLIENT_KEY"),
		ServerName: get("IDGEN_CLIENT_SERVER_NAME")}
	cfg.TLS = cfg.CA != "" || cfg.Cert != "" || cfg.Key != "" || cfg.ServerName != ""
	if v := get("IDGEN_CLIENT_CONNECT_TIMEOUT_MS"); v != "" {
		if cfg.ConnectTimeout, err = parseTimeoutMs("IDGEN_CLIENT_CONNECT_TIMEOUT_MS", v); err != nil {
			return Config{}, err
		}
	}
	if v := get("IDGEN_CLIENT_TIMEOUT_MS"); v != "" {
		if cfg.RequestTimeout, err = parseTimeoutMs("IDGEN_CLIENT_TIMEOUT_MS", v); err != nil {
			return Config{}, err
		}
	}
	if err := cfg.check(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Options merges the configuration into opts (the settings given in code: prefetch,
// logger, ...). A setting given both in opts and in the configuration is an error, never a
// silent precedence: opts.Nodes, opts.TLS (the URL's scheme says whether TLS is on),
// opts.ConnectTimeout / RequestTimeout next to the URL's, opts.Expand next to expand=.
// The TLS files are read here: a missing or unreadable file is an error.
func (cfg Config) Options(opts Options) (Options, error) {
	if len(cfg.Nodes) == 0 {
		return opts, configError("the configuration names no node")
	}
	if len(opts.Nodes) > 0 {
		return opts, configError("Options.Nodes is set and the URL/IDGEN_NODES names the nodes too: give them in one place")
	}
	if opts.TLS != nil && (cfg.TLS || cfg.fromURL) {
		return opts, configError("Options.TLS is set and the configuration says whether TLS is on too (idgens:// or IDGEN_CLIENT_*): give it in one place")
	}
	if opts.ConnectTimeout != 0 && cfg.ConnectTimeout != 0 {
		return opts, configError("the connect timeout is given both in Options.ConnectTimeout and in the configuration")
	}
	if opts.RequestTimeout != 0 && cfg.RequestTimeout != 0 {
		return opts, configError("the request timeout is given both in Options.RequestTimeout and in the configuration")
	}
	if opts.Expand && cfg.expandSet {
		return opts, configError("expand is given both in Options.Expand and in the URL")
	}
	opts.Nodes = append([]string(nil), cfg.Nodes...)
	if cfg.ConnectTimeout != 0 {
		opts.ConnectTimeout = cfg.ConnectTimeout
	}
	if cfg.RequestTimeout != 0 {
		opts.RequestTimeout = cfg.RequestTimeout
	}
	if cfg.Expand {
		opts.Expand = true
	}
	if cfg.TLS {
		t, err := cfg.tlsConfig()
		if err != nil {
			return opts, err
		}
		opts.TLS = t
	}
	return opts, nil
}

// tlsConfig builds the TLS configuration: the CA file's roots (the system's without one),
// the client certificate, the server name.
func (cfg Config) tlsConfig() (*tls.Config, error) {
	t := &tls.Config{ServerName: cfg.ServerName, NextProtos: []string{"idgen/1"}, MinVersion: tls.VersionTLS12}
	if cfg.CA != "" {
		pem, err := os.ReadFile(cfg.CA)
		if err != nil {
			return nil, fmt.Errorf("idgen: reading the CA file: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("idgen: %s holds no PEM certificate", cfg.CA)
		}
		t.RootCAs = roots
	}
	if cfg.Cert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("idgen: loading the client certificate %s and key %s: %w", cfg.Cert, cfg.Key, err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// NewClientFromURL is NewClient configured by an idgen URL (ParseURL) and opts for the
// settings a URL does not hold (a setting in both is an error). Like NewClient it connects
// lazily.
func NewClientFromURL(rawURL string, opts Options) (*Client, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	o, err := cfg.Options(opts)
	if err != nil {
		return nil, err
	}
	return NewClient(o)
}

// NewClientFromEnv is NewClient configured by IDGEN_NODES and the IDGEN_CLIENT_* variables
// (ConfigFromEnv) and opts for the rest (a setting in both is an error).
func NewClientFromEnv(opts Options) (*Client, error) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	o, err := cfg.Options(opts)
	if err != nil {
		return nil, err
	}
	return NewClient(o)
}
