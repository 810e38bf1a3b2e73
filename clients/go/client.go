package idgen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPort is the ID protocol's default port.
const DefaultPort = 7420

// maxIDsPerCall guards against accidental huge requests (16 Mi IDs).
const maxIDsPerCall = 1 << 24

// Options configure a Client. Zero values take the defaults.
type Options struct {
	// Nodes are "host:port" addresses ("[::1]:7420" for IPv6), tried in this order.
	Nodes []string
	// TLS, when set, speaks TLS to every node: the node's certificate must chain to
	// RootCAs (the system's roots when nil) and name ServerName, or, when ServerName is
	// empty, the host of each node's address. Certificates are presented for mutual TLS.
	// NextProtos defaults to "idgen/1", MinVersion is at least TLS 1.2, and
	// InsecureSkipVerify is refused. LoadTLSConfig builds one from PEM files.
	TLS *tls.Config
	// ConnectTimeout bounds the TCP connect, the TLS handshake and the HELLO handshake.
	// Default 1 s.
	ConnectTimeout time.Duration
	// RequestTimeout: a node that owes answers and sends nothing for this long is treated
	// as down, and the calls in flight on it fail over. Default 1 s. Writes have no
	// deadline: a node slow to read is not down while its answers keep coming. Each call's
	// own deadline and cancellation come from its context.
	RequestTimeout time.Duration
	// A node that failed is skipped for BackoffMin, doubling per consecutive failure up
	// to BackoffMax. Defaults 200 ms and 10 s.
	BackoffMin, BackoffMax time.Duration
	// Prefetch is the size of the local pool NextID serves from (0: no pool). The pool
	// is refilled in the background when it holds fewer than LowWater IDs (default
	// Prefetch/4).
	Prefetch, LowWater int
	// MaxVersion is the highest protocol version offered (1 to 5; default 5). Version 2
	// answers batches as runs of consecutive IDs, expanded here; version 3 adds named
	// sequences (NextValue, NextValues); version 4 UUIDs (NextUUID, NextUUIDs); version 5
	// IDs with options (NextIDsWith, NextMaskedIDs). The client negotiates: an older node
	// answers with its own highest version, and only the calls it speaks work there.
	MaxVersion uint16
	// SequencePrefetch is K, the number of values NextValue/NextValues ask for at once per
	// dense sequence, keeping the rest in a buffer per sequence name to answer later calls
	// from (0: off, every call sends a request for exactly what it needs). Strict
	// sequences are never buffered. Values left in a buffer are lost when the client stops
	// (gaps, up to K per name), and values handed out by two clients interleave. At most
	// 1048576.
	SequencePrefetch int
	// Expand makes each address a node's host resolves to a node of its own (a Kubernetes
	// headless Service: every ready pod), in the resolver's order, duplicates removed; TLS
	// still verifies the host given. Names are resolved in NewClient (one that resolves to
	// nothing is a node that is down) and again when a node fails, at most once a second.
	// Without it a node is one host:port whose addresses are tried in turn.
	Expand bool
	// lookup resolves a name for Expand (tests only; nil: net.DefaultResolver.LookupHost).
	lookup func(ctx context.Context, host string) ([]string, error)
	// Logger receives the client's log records (nil: nothing is logged). Any value with
	// *slog.Logger's Debug/Info/Warn/Error methods: on Go 1.21+ a *slog.Logger as it is.
	// See Logger for the events and their levels.
	Logger Logger
	// Hooks receives every event (connect, connect_failed, request, refused, failover,
	// node_down, node_up) with its fields, for metrics and tracing (nil: none). HookFunc
	// adapts a function. A hook that panics is recovered and ignored (see Hooks).
	Hooks Hooks
}

// Client hands out IDs from a set of idgen nodes. It is safe for use by many goroutines:
// each node has at most one connection, and every goroutine's requests are pipelined on
// it.
//
// A call tries the node that last answered, then the others in order, each at most once
// (but for one immediate reconnect after RANGE_CHANGED or a connection the node closed).
// A node that answers a status whose "retry elsewhere" column is yes or a status that
// closes the connection (1xx, 5xx), refuses or drops the connection, stalls, fails TLS or
// sends a bad frame is marked down for a backoff, and the whole call is retried on the
// next node. Other statuses (2xx, 304 EXHAUSTED, 307 SEQUENCE_USED_UP) are returned at
// once. Retrying cannot duplicate an ID: IDs of a failed or
// abandoned request are only ever lost (a gap).
//
// IDs from one connection are strictly increasing, so while the client stays on one node
// the IDs each goroutine receives increase; after a failover they come from another node,
// unique but not ordered against the earlier ones.
type Client struct {
	opts      Options
	nodesMu   sync.Mutex
	nodes     []*node // replaced as a whole (expand), never changed in place: see nodeList
	preferred atomic.Pointer[node]
	stats     stats
	tokens    atomic.Uint64
	base      context.Context // cancelled by Close
	cancel    context.CancelFunc
	closed    atomic.Bool

	layoutMu sync.Mutex
	layout   *Layout

	pool *pool
	seqs *seqBuffers // nil without SequencePrefetch
	obs  *observer

	// Options.Expand: the configured entries, the resolver, the last resolution.
	entries     []nodeEntry
	lookup      func(ctx context.Context, host string) ([]string, error)
	resolveMu   sync.Mutex
	resolving   bool
	lastResolve time.Time
	wg          sync.WaitGroup
}

type node struct {
	addr  string // "host:port" dialed: the entry, or (Options.Expand) one of its addresses
	entry string // the configured "host:port" it comes from
	tls   *tls.Config

	// Options.Expand: unresolved, a name that resolved to nothing (the node is down);
	// gone, an address its name no longer resolves to (dropped when its connection
	// fails); removed, out of the list (a connection dialed late is closed).
	unresolved, gone, removed bool

	mu        sync.Mutex
	conn      *conn
	dialing   chan struct{} // closed when the dial in progress ends
	dialErr   error
	failures  int
	downUntil time.Time
	lastErr   error
}

type stats struct {
	connects, requests, ids, pings, nodeFailures, failovers atomic.Int64
	prefetchRefills, prefetchServed                         atomic.Int64
	valueRequests, values, valuesBuffered                   atomic.Int64
	uuidRequests, uuids                                     atomic.Int64
}

// Stats are a client's counters.
type Stats struct {
	Connects        int64 // connections opened (handshake completed)
	Requests        int64 // GET_IDS/GET_RANGES frames sent
	IDs             int64 // IDs received
	Pings           int64
	NodeFailures    int64 // a node marked down
	Failovers       int64 // a call moved on to another node
	PrefetchRefills int64
	PrefetchServed  int64
	ValueRequests   int64 // GET_VALUES frames sent
	Values          int64 // sequence values received in VALUES frames
	ValuesBuffered  int64 // sequence values handed out from a prefetch buffer, without a request of their call
	UUIDRequests    int64 // GET_UUIDS frames sent
	UUIDs           int64 // UUIDs received in UUIDS frames
}

// NodeState is one node's state, from Client.Nodes.
type NodeState struct {
	Addr      string
	Entry     string // the configured "host:port" Addr comes from (Addr itself without Options.Expand)
	Connected bool
	Down      bool          // backing off now
	RetryIn   time.Duration // until it is tried again
	Failures  int           // consecutive
	LastError error
	Hello     *ServerHello // of the open connection
	TLS       *tls.ConnectionState
}

// NewClient checks opts and returns a client. It connects lazily, on the first call.
func NewClient(opts Options) (*Client, error) {
	if len(opts.Nodes) == 0 {
		return nil, errors.New("idgen: Options.Nodes is empty")
	}
	def := func(d *time.Duration, v time.Duration, name string) error {
		if *d < 0 {
			return fmt.Errorf("idgen: Options.%s is negative", name)
		}
		if *d == 0 {
			*d = v
		}
		return nil
	}
	for _, f := range []struct {
		d    *time.Duration
		v    time.Duration
		name string
	}{
		{&opts.ConnectTimeout, time.Second, "ConnectTimeout"},
		{&opts.RequestTimeout, time.Second, "RequestTimeout"},
		{&opts.BackoffMin, 200 * time.Millisecond, "BackoffMin"},
		{&opts.BackoffMax, 10 * time.Second, "BackoffMax"},
	} {
		if err := def(f.d, f.v, f.name); err != nil {
			return nil, err
		}
	}
	if opts.BackoffMin > opts.BackoffMax {
		return nil, errors.New("idgen: Options.BackoffMin is above BackoffMax")
	}
	if opts.Prefetch < 0 || opts.LowWater < 0 {
		return nil, errors.New("idgen: Options.Prefetch and LowWater must not be negative")
	}
	if opts.Prefetch > maxIDsPerCall {
		return nil, fmt.Errorf("idgen: Options.Prefetch is above %d", maxIDsPerCall)
	}
	if opts.Prefetch > 0 && opts.LowWater == 0 {
		opts.LowWater = opts.Prefetch / 4
	}
	if opts.Prefetch > 0 && opts.LowWater >= opts.Prefetch {
		return nil, errors.New("idgen: Options.LowWater must be below Prefetch")
	}
	switch opts.MaxVersion {
	case 0:
		opts.MaxVersion = MaxProtocolVersion
	case 1, 2, 3, 4, 5:
	default:
		return nil, fmt.Errorf("idgen: Options.MaxVersion %d: this client speaks versions 1 to 5", opts.MaxVersion)
	}
	if opts.SequencePrefetch < 0 || opts.SequencePrefetch > MaxValuesPerCall {
		return nil, fmt.Errorf("idgen: Options.SequencePrefetch %d: must be in 0..=%d", opts.SequencePrefetch, MaxValuesPerCall)
	}
	if opts.SequencePrefetch > 0 && opts.MaxVersion < 3 {
		return nil, fmt.Errorf("idgen: Options.SequencePrefetch needs protocol version 3, Options.MaxVersion is %d", opts.MaxVersion)
	}
	if opts.TLS != nil && opts.TLS.InsecureSkipVerify {
		return nil, errors.New("idgen: TLS without certificate verification is refused; trust the nodes' authority with RootCAs instead")
	}
	c := &Client{opts: opts, obs: newObserver(opts.Logger, opts.Hooks)}
	c.opts.Nodes = append([]string(nil), opts.Nodes...)
	seen := map[string]bool{}
	for _, addr := range opts.Nodes {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return nil, fmt.Errorf("idgen: node %q is not host:port", addr)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("idgen: node %q: port must be 1..65535", addr)
		}
		if seen[addr] {
			return nil, fmt.Errorf("idgen: node %q is listed twice", addr)
		}
		seen[addr] = true
		c.entries = append(c.entries, nodeEntry{addr: addr, host: host, port: port})
		if !opts.Expand {
			c.nodes = append(c.nodes, c.newNode(addr, addr, host))
		}
	}
	c.base, c.cancel = context.WithCancel(context.Background())
	if opts.Expand {
		if c.lookup = opts.lookup; c.lookup == nil {
			c.lookup = net.DefaultResolver.LookupHost
		}
		c.nodes = c.resolveAll(c.base, nil)
	}
	if opts.SequencePrefetch > 0 {
		c.seqs = newSeqBuffers(opts.SequencePrefetch)
	}
	if opts.Prefetch > 0 {
		c.pool = newPool(opts.Prefetch, opts.LowWater)
		c.wg.Add(1)
		go c.refillLoop()
	}
	return c, nil
}

// Dial is NewClient followed by a connection to the first node that answers (within ctx),
// so that a wrong address or certificate shows at once.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	c, err := NewClient(opts)
	if err != nil {
		return nil, err
	}
	if _, err := c.Layout(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// nodeTLS is the node's TLS configuration: the caller's, with the server name, ALPN and
// minimum version filled in.
func nodeTLS(base *tls.Config, host string) *tls.Config {
	t := base.Clone()
	if t.ServerName == "" {
		t.ServerName = host
	}
	if len(t.NextProtos) == 0 {
		t.NextProtos = []string{"idgen/1"}
	}
	if t.MinVersion < tls.VersionTLS12 {
		t.MinVersion = tls.VersionTLS12
	}
	return t
}

// NextID returns one ID: from the prefetch pool when Options.Prefetch is set, else with
// one request.
func (c *Client) NextID(ctx context.Context) (uint64, error) {
	if c.pool != nil {
		return c.poolNext(ctx)
	}
	ids, err := c.NextIDs(ctx, 1)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// NextIDs returns n IDs from one node, strictly increasing, all or nothing. A count above
// the node's max_batch is sent as several requests, one right behind the other, and the
// answers joined in order; if a part fails, the whole call fails over or fails (the IDs
// of the other parts are dropped: a gap, never a duplicate). It does not use the prefetch
// pool.
//
// An n outside 1..=16777216 (0 included, as every idgen client refuses a count of 0) fails
// with ErrInvalidArgument before anything is sent.
func (c *Client) NextIDs(ctx context.Context, n int) ([]uint64, error) {
	if n < 1 || n > maxIDsPerCall {
		return nil, argError("NextIDs: n = %d: must be in 1..=%d", n, maxIDsPerCall)
	}
	var ids []uint64
	err := c.withFailover(ctx, "ids", n, func(cc *conn) error {
		var err error
		ids, err = c.fetch(ctx, cc, n)
		return err
	})
	return ids, err
}

// NextUUID returns one version 7 UUID. See NextUUIDs.
func (c *Client) NextUUID(ctx context.Context) (UUID, error) {
	u, err := c.NextUUIDs(ctx, 1)
	if err != nil {
		return UUID{}, err
	}
	return u[0], nil
}

// NextUUIDs returns n RFC 9562 version 7 UUIDs from one node, strictly increasing, all or
// nothing (protocol version 4: GET_UUIDS, protocol/PROTOCOL.md §3.7). The node makes each
// from one ID it issues (the ID's millisecond, then its worker and sequence, then random
// bits), so they are unique across the cluster as its IDs are, and on one connection they
// continue its IDs' order; Layout.DecodeUUID takes one apart.
//
// Like NextIDs: a count above the node's max_batch is sent as several requests and joined,
// a failed part fails the whole call over or fails, and an n outside 1..=16777216 fails
// with ErrInvalidArgument before anything is sent. Every answer is checked (the count,
// version 7, the variant bits, strictly increasing on the connection); one that fails is a
// *ProtocolError and the call fails over. A node that negotiated a version below 4 (or
// Options.MaxVersion below 4) fails the call with a *VersionError (ErrUUIDsUnsupported) at
// once: nothing sent, no other node tried. The prefetch pool serves IDs only.
func (c *Client) NextUUIDs(ctx context.Context, n int) ([]UUID, error) {
	if n < 1 || n > maxIDsPerCall {
		return nil, argError("NextUUIDs: n = %d: must be in 1..=%d", n, maxIDsPerCall)
	}
	if c.closed.Load() {
		return nil, c.errClosed()
	}
	if c.opts.MaxVersion < UUIDsVersion {
		return nil, &VersionError{Version: c.opts.MaxVersion, Required: UUIDsVersion}
	}
	var uuids []UUID
	err := c.withFailover(ctx, "uuids", n, func(cc *conn) error {
		var err error
		uuids, err = c.fetchUUIDs(ctx, cc, n)
		return err
	})
	return uuids, err
}

// fetchUUIDs asks one connection for n UUIDs, split by its max_batch.
func (c *Client) fetchUUIDs(ctx context.Context, cc *conn, n int) ([]UUID, error) {
	if cc.hello.Version < UUIDsVersion {
		return nil, &VersionError{Node: cc.node, Version: cc.hello.Version, Required: UUIDsVersion}
	}
	batch := int(cc.hello.MaxBatch)
	if batch < 1 {
		batch = 1
	}
	parts := (n + batch - 1) / batch
	uuids := make([]UUID, n)
	r := newRequest(parts)
	for i := range r.slots {
		lo := i * batch
		hi := lo + batch
		if hi > n {
			hi = n
		}
		r.slots[i].op = opGetUUIDs
		r.slots[i].uuids = uuids[lo:hi]
	}
	if err := cc.submit(r); err != nil {
		return nil, err
	}
	c.stats.uuidRequests.Add(int64(parts))
	if err := r.wait(ctx, cc.node); err != nil {
		return nil, err
	}
	return uuids, nil
}

// Ping sends a PING to a node (with failover) and returns the round-trip time.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	var rtt time.Duration
	err := c.withFailover(ctx, "ping", 1, func(cc *conn) error {
		start := time.Now()
		r := newRequest(1)
		r.slots[0].op = opPing
		r.slots[0].token = c.tokens.Add(1)
		if err := cc.submit(r); err != nil {
			return err
		}
		c.stats.pings.Add(1)
		if err := r.wait(ctx, cc.node); err != nil {
			return err
		}
		rtt = time.Since(start)
		return nil
	})
	return rtt, err
}

// Layout is the cluster's ID layout, from the first HELLO_OK (it connects if needed).
func (c *Client) Layout(ctx context.Context) (Layout, error) {
	c.layoutMu.Lock()
	l := c.layout
	c.layoutMu.Unlock()
	if l != nil {
		return *l, nil
	}
	if err := c.withFailover(ctx, "", 0, func(*conn) error { return nil }); err != nil {
		return Layout{}, err
	}
	c.layoutMu.Lock()
	defer c.layoutMu.Unlock()
	return *c.layout, nil
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		Connects: s.connects.Load(), Requests: s.requests.Load(), IDs: s.ids.Load(),
		Pings: s.pings.Load(), NodeFailures: s.nodeFailures.Load(), Failovers: s.failovers.Load(),
		PrefetchRefills: s.prefetchRefills.Load(), PrefetchServed: s.prefetchServed.Load(),
		ValueRequests: s.valueRequests.Load(), Values: s.values.Load(), ValuesBuffered: s.valuesBuffered.Load(),
		UUIDRequests: s.uuidRequests.Load(), UUIDs: s.uuids.Load(),
	}
}

// Nodes returns each node's state.
func (c *Client) Nodes() []NodeState {
	now := time.Now()
	list := c.nodeList()
	out := make([]NodeState, 0, len(list))
	for _, n := range list {
		n.mu.Lock()
		st := NodeState{Addr: n.addr, Entry: n.entry, Failures: n.failures, LastError: n.lastErr}
		if n.downUntil.After(now) {
			st.Down, st.RetryIn = true, n.downUntil.Sub(now)
		}
		if n.conn != nil && n.conn.alive() {
			h := n.conn.hello
			st.Connected, st.Hello, st.TLS = true, &h, n.conn.tlsState
		}
		n.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Close closes every connection and stops the prefetch goroutine. IDs still in the pool
// are dropped (a gap, never a duplicate); calls waiting fail with ErrClosed. Close is
// idempotent.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.cancel()
	for _, n := range c.nodeList() {
		n.mu.Lock()
		cc := n.conn
		n.conn = nil
		n.mu.Unlock()
		if cc != nil {
			cc.close()
		}
	}
	if c.pool != nil {
		c.pool.close()
	}
	if c.seqs != nil {
		c.seqs.clear()
	}
	c.wg.Wait()
	return nil
}

func (c *Client) errClosed() error { return fmt.Errorf("idgen: the client is closed: %w", ErrClosed) }

// fetch asks cc for n IDs, split by the node's max_batch.
func (c *Client) fetch(ctx context.Context, cc *conn, n int) ([]uint64, error) {
	batch := int(cc.hello.MaxBatch)
	if batch < 1 {
		batch = 1
	}
	parts := (n + batch - 1) / batch
	ids := make([]uint64, n)
	r := newRequest(parts)
	op := byte(opGetIDs)
	if cc.hello.Version >= 2 {
		op = opGetRanges
	}
	for i := range r.slots {
		lo := i * batch
		hi := lo + batch
		if hi > n {
			hi = n
		}
		r.slots[i].op = op
		r.slots[i].dst = ids[lo:hi]
	}
	if err := cc.submit(r); err != nil {
		return nil, err
	}
	c.stats.requests.Add(int64(parts))
	if err := r.wait(ctx, cc.node); err != nil {
		return nil, err
	}
	return ids, nil
}

// withFailover runs one call on the preferred node, failing over as the type says.
// op and count name the call for the request event (op "": no event).
func (c *Client) withFailover(ctx context.Context, op string, count int, run func(*conn) error) error {
	return c.runCall(ctx, op, count, nil, run)
}

// runCall runs one call: on the preferred node, failing over as the type says (only nil),
// or on the node only alone (a keyed call): then a failure that would have moved the call
// on to another node is a *KeyedError instead, and a node backing off is still tried.
func (c *Client) runCall(ctx context.Context, op string, count int, only *node, run func(*conn) error) error {
	if op == "" || !c.obs.on() {
		_, err := c.runCallOn(ctx, op, only, run)
		return err
	}
	start := time.Now()
	n, err := c.runCallOn(ctx, op, only, run)
	e := Event{Name: EventRequest, Op: op, Count: count, Duration: time.Since(start), Err: err, Outcome: outcomeOf(err)}
	if n != nil {
		e.Node = n.addr
	}
	c.obs.emit(e)
	return err
}

// runCallOn is runCall; it returns the node that answered (nil: none did).
func (c *Client) runCallOn(ctx context.Context, op string, only *node, run func(*conn) error) (answered *node, _ error) {
	if c.closed.Load() {
		return nil, c.errClosed()
	}
	list := c.nodeList()
	if only != nil {
		list = []*node{only}
	}
	count := len(list)
	start := 0
	if p := c.preferred.Load(); p != nil && only == nil {
		for i, n := range list {
			if n == p {
				start = i
				break
			}
		}
	}
	var tried []error
	var from *node // the node the call left, for the failover event
	var fromErr error
	var again map[*node]bool // reconnected to this node once already in this call
	for k := 0; k < count; k++ {
		n := list[(start+k)%count]
		if only == nil && n.isDown(time.Now()) {
			continue
		}
		if len(tried) > 0 {
			c.stats.failovers.Add(1)
			if from != nil && c.obs.on() {
				c.obs.emit(Event{Name: EventFailover, From: from.addr, To: n.addr, Reason: errString(fromErr)})
			}
			from = nil
		}
		for {
			cc, err := c.connFor(ctx, n)
			if err == nil {
				err = run(cc)
			}
			if err == nil {
				n.mu.Lock()
				failing := n.failures > 0
				n.failures = 0
				n.mu.Unlock()
				if failing && c.obs.on() {
					c.obs.emit(Event{Name: EventNodeUp, Node: n.addr, Reason: "served a call"})
				}
				if only == nil {
					c.preferred.Store(n)
				}
				return n, nil
			}
			if c.closed.Load() {
				return nil, c.errClosed()
			}
			if ctx.Err() != nil {
				return nil, err // the context's error, from the wait or the dial
			}
			if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrSequencesUnsupported) || errors.Is(err, ErrUUIDsUnsupported) || errors.Is(err, ErrIDsWithUnsupported) {
				// Refused before sending (the call does not fit this node's limits, or the
				// node is too old for it): nothing to retry, the node is fine.
				return nil, err
			}
			if again == nil {
				again = map[*node]bool{}
			}
			var se *ServerError
			var ue *UnavailableError
			if errors.As(err, &se) && c.obs.on() {
				c.obs.emit(Event{Name: EventRefused, Node: n.addr, Op: op, Status: se.Status, Message: se.Message})
			}
			switch {
			case se != nil && se.Status == StatusRangeChanged && !again[n]:
				// The node took another worker range and closed this connection. The node
				// is fine: reconnect at once (the new HELLO_OK announces the new range)
				// and retry the whole call there, once; then the next node.
				again[n] = true
				c.drop(n, cc)
				continue
			case errors.As(err, &ue) && ue.peerClosed && cc != nil && !again[n] && time.Since(cc.opened) > c.opts.RequestTimeout:
				// An older connection the node closed (an idle timeout, a restart): try
				// one fresh connection before calling the node down.
				again[n] = true
				c.drop(n, cc)
				continue
			case se != nil && !se.RetryElsewhere() && !se.Closes():
				// 2xx, 304 EXHAUSTED, 307: about the request or the cluster, every node
				// would say the same: the call fails at once, the node is fine.
				return nil, err
			case se != nil:
				// 300, 301, 306 (the connection stays usable), 302, 303, 305 again, and a
				// status that closes the connection (1xx, 5xx): a node failure, back off.
				c.markDown(n, cc, err, !se.Closes())
			case errors.Is(err, ErrClosed):
				return nil, err
			default: // unavailable, TLS, protocol errors
				c.markDown(n, cc, err, false)
			}
			if only != nil {
				return nil, &KeyedError{Node: n.addr, Err: err}
			}
			tried = append(tried, err)
			from, fromErr = n, err
			break
		}
	}
	if len(tried) == 1 {
		return nil, tried[0]
	}
	now := time.Now()
	e := &NoNodeError{Errors: map[string]error{}, RetryIn: map[string]time.Duration{}}
	if len(tried) > 0 {
		e.last = tried[len(tried)-1]
	}
	for _, n := range list {
		n.mu.Lock()
		e.Errors[n.addr] = n.lastErr
		if n.downUntil.After(now) {
			e.RetryIn[n.addr] = n.downUntil.Sub(now)
		}
		n.mu.Unlock()
	}
	return nil, e
}

func (n *node) isDown(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.downUntil.After(now)
}

// connFor returns the node's open connection, or dials one. The dial runs in its own
// goroutine, bounded by ConnectTimeout (and Close), so that a caller whose context ends
// does not abort it for the others waiting on it.
func (c *Client) connFor(ctx context.Context, n *node) (*conn, error) {
	for attempt := 0; ; attempt++ {
		n.mu.Lock()
		if n.conn != nil && n.conn.alive() {
			cc := n.conn
			n.mu.Unlock()
			return cc, nil
		}
		ch := n.dialing
		if ch == nil {
			if attempt > 1 {
				n.mu.Unlock()
				return nil, &UnavailableError{Node: n.addr, Detail: "every new connection failed at once"}
			}
			ch = make(chan struct{})
			n.dialing = ch
			c.wg.Add(1)
			go c.dialNode(n, ch)
		}
		n.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctxError(ctx, n.addr)
		}
		n.mu.Lock()
		cc, err := n.conn, n.dialErr
		n.mu.Unlock()
		if cc == nil && err != nil {
			return nil, err
		}
		// Connected, or the new connection already failed (another caller met its error):
		// look again.
	}
}

func (c *Client) dialNode(n *node, ch chan struct{}) {
	defer c.wg.Done()
	started := time.Now()
	var cc *conn
	var err error
	if n.unresolved {
		err = &UnavailableError{Node: n.addr, Detail: "the name resolves to no address (Options.Expand)"}
	} else {
		ctx, cancel := context.WithTimeout(c.base, c.opts.ConnectTimeout)
		cc, err = dial(ctx, n.addr, dialOptions{tls: n.tls, maxVersion: c.opts.MaxVersion,
			timeout: c.opts.RequestTimeout, stats: &c.stats})
		cancel()
	}
	if err == nil {
		if lerr := c.checkLayout(cc); lerr != nil {
			cc.close()
			cc, err = nil, lerr
		}
	}
	if err == nil && c.closed.Load() {
		cc.close()
		cc, err = nil, c.errClosed()
	}
	if c.obs.on() && !c.closed.Load() {
		if err == nil {
			c.obs.emit(Event{Name: EventConnect, Node: n.addr, Address: cc.nc.RemoteAddr().String(),
				Version: cc.hello.Version, Duration: time.Since(started)})
		} else {
			c.obs.emit(Event{Name: EventConnectFailed, Node: n.addr, Err: err, Duration: time.Since(started)})
		}
	}
	if err != nil {
		c.markDown(n, nil, err, false)
	}
	n.mu.Lock()
	if n.removed && cc != nil { // dropped from the list (Options.Expand) while dialing
		cc.close()
		cc, err = nil, &UnavailableError{Node: n.addr, Detail: "the name no longer resolves to this address"}
	}
	n.conn, n.dialErr, n.dialing = cc, err, nil
	n.mu.Unlock()
	close(ch)
	if cc != nil && c.closed.Load() { // Close ran while this dial finished
		n.mu.Lock()
		if n.conn == cc {
			n.conn = nil
		}
		n.mu.Unlock()
		cc.close()
	}
}

func (c *Client) checkLayout(cc *conn) error {
	l := cc.hello.Layout()
	c.layoutMu.Lock()
	defer c.layoutMu.Unlock()
	if c.layout == nil {
		c.layout = &l
		return nil
	}
	if *c.layout != l {
		return &ProtocolError{Node: cc.node, Detail: fmt.Sprintf("the node's ID layout %+v differs from the cluster's %+v", l, *c.layout)}
	}
	return nil
}

// drop forgets cc (if it is still the node's connection) and closes it.
func (c *Client) drop(n *node, cc *conn) {
	if cc == nil {
		return
	}
	n.mu.Lock()
	if n.conn == cc {
		n.conn = nil
	}
	n.mu.Unlock()
	cc.fail(&UnavailableError{Node: n.addr, Detail: "connection dropped"})
}

// markDown backs a node off. Only the first report of one failure counts: a report about
// an older connection, or while the node is already backing off, does not extend it.
// keep: the node answered with a status that leaves cc usable.
func (c *Client) markDown(n *node, cc *conn, err error, keep bool) {
	now := time.Now()
	down := false
	n.mu.Lock()
	stale := cc != nil && n.conn != nil && n.conn != cc
	if cc != nil && n.conn == cc && !keep {
		n.conn = nil
	}
	if stale || n.downUntil.After(now) {
		if n.lastErr == nil {
			n.lastErr = err
		}
	} else {
		n.failures++
		delay := c.opts.BackoffMin
		for i := 1; i < n.failures && delay < c.opts.BackoffMax; i++ {
			delay *= 2
		}
		if delay > c.opts.BackoffMax {
			delay = c.opts.BackoffMax
		}
		n.downUntil = now.Add(delay)
		n.lastErr = err
		c.stats.nodeFailures.Add(1)
		down = true
	}
	gone := n.gone
	n.mu.Unlock()
	if cc != nil && !keep {
		cc.fail(err)
	}
	if down && c.obs.on() && !c.closed.Load() {
		c.obs.emit(Event{Name: EventNodeDown, Node: n.addr, Reason: errString(err)})
	}
	if c.opts.Expand && !c.closed.Load() {
		if gone {
			c.removeNode(n)
		}
		c.maybeResolve()
	}
}
