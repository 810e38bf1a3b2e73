package idgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// One connection to one node.
//
// Pipelining: callers append their request frames to the connection's write buffer and
// one slot per frame to its FIFO of pending slots, both under one mutex, so the FIFO is in
// wire order. A writer goroutine takes whatever has accumulated and writes it with one
// Write (while it writes, more requests pile up for the next one). A reader goroutine
// decodes the answers and hands each to the slot at the head of the FIFO (the server
// answers strictly in request order), decoding IDs straight into the caller's slice. Every
// request state change happens on the reader goroutine, so requests need no lock; a
// caller waits on its request's channel or on its context.
//
// Stalls: while requests are outstanding the reader's read deadline is kept at
// RequestTimeout past the last bytes received; a node that sends nothing for that long is
// treated as down and every request in flight on it fails over. Writes have no deadline:
// a write that waits on a node slow to read (its socket buffer full of pipelined requests)
// is not a failure while answers keep coming, and a node that stops reading stops
// answering, so the read deadline fails the connection and its close ends the write. A
// caller whose context ends first just stops waiting; its answer, when it comes, is
// matched by position and dropped, so the order is never lost.

const (
	readBufferSize = 64 * 1024
	// After the HELLO could not be sent over TLS: how long to wait for the alert saying why.
	alertWait = 200 * time.Millisecond
)

// slot is one request frame waiting for its answer.
type slot struct {
	req   *request
	op    byte     // opGetIDs, opGetRanges, opGetValues, opGetUUIDs, opGetIDsWith or opPing
	dst   []uint64 // where the IDs (or a sequence's values) go
	uuids []UUID   // GET_UUIDS: where the UUIDs go
	token uint64
	name  string       // GET_VALUES: the sequence
	mode  SequenceMode // GET_VALUES: the mode VALUES announced (set by the reader)

	// GET_IDS_WITH (version 5): its options, and the key ID MASKED_IDS announced (set by
	// the reader).
	hasAfter bool
	after    uint64
	key      string
	masked   bool
	keyID    uint8
}

// request is one call's frames on one connection; only the reader goroutine changes it
// once it is submitted.
type request struct {
	remaining int
	err       error
	finished  bool
	done      chan struct{}
	slots     []slot
	inline    [1]slot
}

func newRequest(parts int) *request {
	r := &request{remaining: parts, done: make(chan struct{})}
	if parts == 1 {
		r.slots = r.inline[:]
	} else {
		r.slots = make([]slot, parts)
	}
	for i := range r.slots {
		r.slots[i].req = r
	}
	return r
}

// answered records one slot's answer (err nil: success).
func (r *request) answered(err error) {
	if r.finished {
		return
	}
	if err != nil {
		r.err, r.finished = err, true
		close(r.done)
		return
	}
	r.remaining--
	if r.remaining == 0 {
		r.finished = true
		close(r.done)
	}
}

// wait waits for the request, or for ctx.
func (r *request) wait(ctx context.Context, node string) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		select {
		case <-r.done:
			return r.err
		default:
			return ctxError(ctx, node)
		}
	}
}

func ctxError(ctx context.Context, node string) error {
	if node == "" {
		return fmt.Errorf("idgen: %w", ctx.Err())
	}
	return fmt.Errorf("idgen: %s: %w", node, ctx.Err())
}

type conn struct {
	node     string
	nc       net.Conn
	hello    ServerHello
	maxFrame uint32
	timeout  time.Duration
	stats    *stats
	opened   time.Time
	tlsState *tls.ConnectionState

	mu      sync.Mutex
	err     error // set once, when the connection fails
	pending []*slot
	wbuf    []byte
	idle    bool // the reader waits without a read deadline
	kick    chan struct{}
	closing chan struct{} // closed when err is set
	done    sync.WaitGroup

	// The reader goroutine's own: the last UUID answered on this connection.
	lastUUID     UUID
	haveLastUUID bool
}

// alive reports whether the connection has not failed.
func (c *conn) alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil
}

// fail marks the connection failed with err (the first error wins) and closes the socket;
// the reader then fails every pending slot with it.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.closing)
	}
	c.mu.Unlock()
	c.nc.Close()
}

// close fails the connection as closed by the client and waits for its goroutines.
func (c *conn) close() {
	c.fail(fmt.Errorf("idgen: %s: connection closed by the client: %w", c.node, ErrClosed))
	c.done.Wait()
}

// submit queues the request's slots and their frames.
func (c *conn) submit(r *request) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	for i := range r.slots {
		s := &r.slots[i]
		switch s.op {
		case opGetIDs:
			c.wbuf = appendGetIDs(c.wbuf, uint32(len(s.dst)))
		case opGetRanges:
			c.wbuf = appendGetRanges(c.wbuf, uint32(len(s.dst)))
		case opGetValues:
			c.wbuf = appendGetValues(c.wbuf, uint32(len(s.dst)), s.name)
		case opGetUUIDs:
			c.wbuf = appendGetUUIDs(c.wbuf, uint32(len(s.uuids)))
		case opGetIDsWith:
			c.wbuf = appendGetIDsWith(c.wbuf, uint32(len(s.dst)), s.hasAfter, s.after, s.key, s.masked)
		case opPing:
			c.wbuf = appendPing(c.wbuf, s.token)
		}
		c.pending = append(c.pending, s)
	}
	if c.idle {
		c.idle = false
		c.nc.SetReadDeadline(time.Now().Add(c.timeout))
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

func (c *conn) start(leftover []byte) {
	c.kick = make(chan struct{}, 1)
	c.closing = make(chan struct{})
	c.idle = true
	c.done.Add(2)
	go c.writeLoop()
	go c.readLoop(leftover)
}

// writeFailureGrace is how long a failed write waits for the reader's verdict on the
// connection before failing it itself.
const writeFailureGrace = 50 * time.Millisecond

func (c *conn) writeLoop() {
	defer c.done.Done()
	var spare []byte
	for {
		select {
		case <-c.kick:
		case <-c.closing:
			return
		}
		c.mu.Lock()
		buf := c.wbuf
		c.wbuf = spare[:0]
		c.mu.Unlock()
		if len(buf) == 0 {
			spare = buf
			continue
		}
		if _, err := c.nc.Write(buf); err != nil {
			// A node that answers with a closing status (305 RANGE_CHANGED, 303) closes the
			// connection, and a write racing with that close fails with a reset. The answer,
			// which the reader gets from what arrived before the reset, says what happened;
			// the write error says only that the socket is gone. Give the reader a moment to
			// report it first (the first error wins).
			select {
			case <-c.closing:
			case <-time.After(writeFailureGrace):
			}
			c.fail(&UnavailableError{Node: c.node, Detail: "sending failed", Err: err, peerClosed: true})
			return
		}
		spare = buf
	}
}

func (c *conn) readLoop(leftover []byte) {
	defer c.done.Done()
	buf := make([]byte, 0, readBufferSize)
	buf = append(buf, leftover...)
	var local []*slot
	li := 0
	var last uint64
	haveLast := false
	var lastDeadline time.Time
	version := c.hello.Version

	err := func() error {
		for {
			// Decode every complete frame in buf.
			off := 0
			for {
				size, err := frameHeader(buf[off:], c.maxFrame, version)
				if err != nil {
					return err
				}
				if size == 0 || len(buf)-off < size {
					if size > cap(buf) {
						grown := make([]byte, len(buf)-off, size+readBufferSize)
						copy(grown, buf[off:])
						buf, off = grown, 0
					}
					break
				}
				if li == len(local) {
					c.mu.Lock()
					local, c.pending = c.pending, local[:0]
					c.mu.Unlock()
					li = 0
				}
				if li == len(local) {
					return &ProtocolError{Detail: fmt.Sprintf("answer 0x%02x with no request outstanding", buf[off+4])}
				}
				s := local[li]
				closing, err := c.answer(s, buf[off+4], buf[off+5:off+size], &last, &haveLast)
				if err != nil {
					// A frame that does not answer its request: s stays pending, so it fails
					// with the others (not left waiting for an answer that never comes).
					return err
				}
				local[li] = nil
				li++
				if closing != nil {
					return closing
				}
				off += size
			}
			n := copy(buf, buf[off:])
			buf = buf[:n]

			// Keep a read deadline while answers are owed.
			now := time.Now()
			c.mu.Lock()
			if li == len(local) && len(c.pending) == 0 {
				if !c.idle {
					c.idle = true
					c.nc.SetReadDeadline(time.Time{})
					lastDeadline = time.Time{}
				}
			} else {
				c.idle = false
				if now.Sub(lastDeadline) > c.timeout/8 {
					c.nc.SetReadDeadline(now.Add(c.timeout))
					lastDeadline = now
				}
			}
			c.mu.Unlock()

			m, err := c.nc.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+m]
			if m > 0 {
				lastDeadline = time.Time{} // progress: extend the deadline
				continue
			}
			if err == nil {
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return &UnavailableError{Node: c.node,
					Detail: fmt.Sprintf("no answer within %s", c.timeout)}
			}
			if tlsErr := remoteTLSAlert(c.node, err); tlsErr != nil {
				return tlsErr
			}
			if errors.Is(err, io.EOF) {
				return &UnavailableError{Node: c.node, Detail: "connection closed by the node", peerClosed: true}
			}
			return &UnavailableError{Node: c.node, Detail: "connection failed", Err: err, peerClosed: true}
		}
	}()
	if pe, ok := err.(*ProtocolError); ok && pe.Node == "" {
		pe.Node = c.node
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.closing)
	}
	err = c.err
	rest := c.pending
	c.pending = nil
	c.mu.Unlock()
	c.nc.Close()
	for _, s := range local[li:] {
		s.req.answered(err)
	}
	for _, s := range rest {
		s.req.answered(err)
	}
}

// answer handles one response frame for slot s. It returns a non-nil closing error for an
// ERROR whose status closes the connection (every later slot fails with it), or an error
// for a frame that breaks the protocol.
func (c *conn) answer(s *slot, op byte, body []byte, last *uint64, haveLast *bool) (closing error, err error) {
	switch {
	case op == opError:
		status, msg, err := parseError(body)
		if err != nil {
			return nil, err
		}
		e := &ServerError{Status: status, Message: msg, Node: c.node}
		s.req.answered(e)
		if status.Closes() {
			return e, nil
		}
		return nil, nil
	case op == opIDs && (s.op == opGetIDs || (s.op == opGetIDsWith && !s.masked)):
		n, err := idsCount(body)
		if err != nil {
			return nil, err
		}
		if n != len(s.dst) {
			return nil, &ProtocolError{Detail: fmt.Sprintf("IDS of %d in answer to %s of %d", n, opName(s.op), len(s.dst))}
		}
		if *last, err = parseIDs(body, s.dst, *last, *haveLast); err != nil {
			return nil, err
		}
		if s.op == opGetIDsWith && s.hasAfter && s.dst[0] <= s.after {
			return nil, &ProtocolError{Detail: fmt.Sprintf("IDS: ID %d is not above the after %d asked for", s.dst[0], s.after)}
		}
		*haveLast = true
		c.stats.ids.Add(int64(n))
	case op == opMaskedIDs && s.op == opGetIDsWith && s.masked:
		keyID, n := maskedIDsHeader(body)
		if n != len(s.dst) {
			return nil, &ProtocolError{Detail: fmt.Sprintf("MASKED_IDS of %d in answer to GET_IDS_WITH of %d", n, len(s.dst))}
		}
		if err := parseMaskedIDs(body, s.dst); err != nil {
			return nil, err
		}
		s.keyID = keyID
		c.stats.ids.Add(int64(n))
	case op == opRanges && s.op == opGetRanges:
		n, err := rangesHeader(body)
		if err != nil {
			return nil, err
		}
		if n != len(s.dst) {
			return nil, &ProtocolError{Detail: fmt.Sprintf("RANGES of %d in answer to GET_RANGES of %d", n, len(s.dst))}
		}
		if *last, err = expandRanges(body, s.dst, *last, *haveLast); err != nil {
			return nil, err
		}
		*haveLast = true
		c.stats.ids.Add(int64(n))
	case op == opValues && s.op == opGetValues:
		mode, n := valuesHeader(body)
		if n != len(s.dst) {
			return nil, &ProtocolError{Detail: fmt.Sprintf("VALUES of %d in answer to GET_VALUES of %d", n, len(s.dst))}
		}
		if err := parseValues(body, s.dst); err != nil {
			return nil, err
		}
		s.mode = mode
		c.stats.values.Add(int64(n))
	case op == opUUIDs && s.op == opGetUUIDs:
		n := uuidsCount(body)
		if n != len(s.uuids) {
			return nil, &ProtocolError{Detail: fmt.Sprintf("UUIDS of %d in answer to GET_UUIDS of %d", n, len(s.uuids))}
		}
		var err error
		if c.lastUUID, err = parseUUIDs(body, s.uuids, c.lastUUID, c.haveLastUUID); err != nil {
			return nil, err
		}
		c.haveLastUUID = true
		c.stats.uuids.Add(int64(n))
	case op == opPong && s.op == opPing:
		if token := beUint64(body); token != s.token {
			return nil, &ProtocolError{Detail: fmt.Sprintf("PONG %d in answer to PING %d", token, s.token)}
		}
	default:
		return nil, &ProtocolError{Detail: fmt.Sprintf("%s in answer to %s", opName(op), opName(s.op))}
	}
	s.req.answered(nil)
	return nil, nil
}

func beUint64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

func opName(op byte) string {
	switch op {
	case opGetIDs:
		return "GET_IDS"
	case opGetRanges:
		return "GET_RANGES"
	case opGetValues:
		return "GET_VALUES"
	case opGetUUIDs:
		return "GET_UUIDS"
	case opGetIDsWith:
		return "GET_IDS_WITH"
	case opMaskedIDs:
		return "MASKED_IDS"
	case opPing:
		return "PING"
	case opHelloOK:
		return "HELLO_OK"
	case opIDs:
		return "IDS"
	case opRanges:
		return "RANGES"
	case opValues:
		return "VALUES"
	case opUUIDs:
		return "UUIDS"
	case opPong:
		return "PONG"
	case opError:
		return "ERROR"
	}
	return fmt.Sprintf("opcode 0x%02x", op)
}

// dialOptions are what a connection needs from the client's options.
type dialOptions struct {
	tls        *tls.Config // nil: plaintext; ServerName already set for the node
	maxVersion uint16
	timeout    time.Duration
	stats      *stats
}

// testHookDialWatcher, when set (by tests only), runs first in dial's watcher goroutine:
// it stands for a scheduler that starts the watcher late.
var testHookDialWatcher func()

// dial connects to node, runs the TLS handshake if configured, and the HELLO handshake,
// all within ctx.
func dial(ctx context.Context, node string, o dialOptions) (*conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", node)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &UnavailableError{Node: node, Detail: "no connection within the connect timeout", Err: ctx.Err()}
		}
		return nil, &UnavailableError{Node: node, Detail: "cannot connect", Err: err}
	}
	nc := raw
	// Bound everything below by ctx: its deadline, and its cancellation (a deadline in the
	// past, set by a watcher goroutine). The watcher is stopped and waited for before the
	// deadline is cleared and the connection handed over: the caller cancels ctx as soon as
	// dial returns, and a watcher that had not reached its select by then (a loaded
	// machine) would find both ctx and stop done, might pick ctx, and would leave a
	// deadline in the past on the open connection, so that its first write or read failed
	// with an i/o timeout and a healthy node was marked down.
	if dl, ok := ctx.Deadline(); ok {
		raw.SetDeadline(dl)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		if testHookDialWatcher != nil {
			testHookDialWatcher()
		}
		select {
		case <-ctx.Done():
			raw.SetDeadline(time.Unix(1, 0))
		case <-stop:
		}
	}()
	var unwatchOnce sync.Once
	unwatch := func() { unwatchOnce.Do(func() { close(stop); <-stopped }) }
	defer unwatch()
	var state *tls.ConnectionState
	if o.tls != nil {
		tc := tls.Client(raw, o.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			if ctx.Err() != nil {
				return nil, &UnavailableError{Node: node, Detail: "no TLS handshake within the connect timeout", Err: ctx.Err()}
			}
			return nil, classifyTLS(node, err)
		}
		st := tc.ConnectionState()
		state = &st
		nc = tc
	}
	hello, leftover, err := handshake(nc, node, o)
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, &UnavailableError{Node: node, Detail: "no HELLO_OK within the connect timeout", Err: ctx.Err()}
		}
		return nil, err
	}
	unwatch()
	raw.SetDeadline(time.Time{})
	c := &conn{
		node:     node,
		nc:       nc,
		hello:    hello,
		maxFrame: responseFrameLimit(hello.MaxBatch, hello.Version),
		timeout:  o.timeout,
		stats:    o.stats,
		opened:   time.Now(),
		tlsState: state,
	}
	o.stats.connects.Add(1)
	c.start(leftover)
	return c, nil
}

func handshake(nc net.Conn, node string, o dialOptions) (ServerHello, []byte, error) {
	if _, err := nc.Write(appendHello(nil, MinProtocolVersion, o.maxVersion)); err != nil {
		if o.tls != nil {
			// With TLS 1.3 a node that refuses the client certificate says so after the
			// handshake and closes; the HELLO may meet a reset. Its alert says why.
			nc.SetReadDeadline(time.Now().Add(alertWait))
			var scratch [512]byte
			if _, rerr := nc.Read(scratch[:]); rerr != nil {
				if tlsErr := remoteTLSAlert(node, rerr); tlsErr != nil {
					return ServerHello{}, nil, tlsErr
				}
			}
		}
		return ServerHello{}, nil, &UnavailableError{Node: node, Detail: "sending HELLO failed", Err: err}
	}
	buf := make([]byte, 0, 512)
	for {
		r, used, err := decodeResponse(buf, defaultMaxResponseFrame, 0)
		if err != nil {
			err.(*ProtocolError).Node = node
			return ServerHello{}, nil, err
		}
		if used > 0 {
			switch r.op {
			case opHelloOK:
			case opError:
				return ServerHello{}, nil, &ServerError{Status: r.status, Message: r.message, Node: node}
			default:
				return ServerHello{}, nil, &ProtocolError{Node: node, Detail: "expected HELLO_OK, got " + opName(r.op)}
			}
			v := r.hello.Version
			if v < MinProtocolVersion || v > o.maxVersion {
				return ServerHello{}, nil, &ProtocolError{Node: node,
					Detail: fmt.Sprintf("the node picked version %d, %d..=%d was offered", v, MinProtocolVersion, o.maxVersion)}
			}
			return r.hello, append([]byte(nil), buf[used:]...), nil
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := nc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 {
			continue
		}
		if err != nil {
			if tlsErr := remoteTLSAlert(node, err); tlsErr != nil {
				return ServerHello{}, nil, tlsErr
			}
			if errors.Is(err, io.EOF) {
				return ServerHello{}, nil, &UnavailableError{Node: node, Detail: "connection closed during the handshake"}
			}
			return ServerHello{}, nil, &UnavailableError{Node: node, Detail: "handshake failed", Err: err}
		}
	}
}

// remoteTLSAlert is the TLSError for an alert the node sent after the handshake (TLS 1.3
// refuses a client certificate that way), or nil when err is not one.
func remoteTLSAlert(node string, err error) *TLSError {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" {
		return nil
	}
	return classifyTLS(node, err)
}

// classifyTLS names the cause of a failed TLS handshake.
func classifyTLS(node string, err error) *TLSError {
	kind := TLSHandshake
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var op *net.OpError
	switch {
	case errors.As(err, &unknown):
		kind = TLSUnknownIssuer
	case errors.As(err, &host):
		kind = TLSNameMismatch
	case errors.As(err, &invalid):
		switch {
		case invalid.Reason == x509.Expired && strings.Contains(invalid.Detail, "before"):
			kind = TLSNotYetValid
		case invalid.Reason == x509.Expired:
			kind = TLSExpired
		default:
			kind = TLSBadCertificate
		}
	case errors.As(err, &op) && op.Op == "remote error":
		msg := op.Err.Error()
		switch {
		case strings.Contains(msg, "certificate required"):
			kind = TLSClientCertificateRequired
		case strings.Contains(msg, "bad certificate"), strings.Contains(msg, "unknown certificate authority"),
			strings.Contains(msg, "expired certificate"), strings.Contains(msg, "certificate unknown"),
			strings.Contains(msg, "unsupported certificate"), strings.Contains(msg, "certificate revoked"),
			strings.Contains(msg, "access denied"), strings.Contains(msg, "decrypt error"):
			kind = TLSClientCertificateRejected
		}
	}
	return &TLSError{Node: node, Kind: kind, Err: err}
}
