package idgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Test helpers: a real `idgen serve` started from IDGEN_BIN, an etcd, test certificates,
// and a fake node. Every wait is bounded; tests stop only the processes they started.

const serverStartTimeout = 30 * time.Second

func idgenBin(t testing.TB) string {
	t.Helper()
	path := os.Getenv("IDGEN_BIN")
	if path == "" {
		path = filepath.Join(repoRoot(t), "target", "debug", "idgen")
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("idgen server binary not found at %s: build it with `cargo build -p idgen` or set IDGEN_BIN", path)
	}
	return path
}

// realNode is a running `idgen serve`.
type realNode struct {
	t       testing.TB
	cmd     *exec.Cmd
	args    []string
	addr    string // plaintext ID protocol address
	tlsAddr string // with --tls-listen
	log     *os.File
	exited  chan struct{}
}

// startNode starts `idgen serve` on 127.0.0.1:0 (unless args give --listen) with the admin
// and HTTP ports off, a data directory of its own, the memory store unless args give one,
// and 2 shards.
func startNode(t testing.TB, args ...string) *realNode {
	t.Helper()
	return startNodeWith(t, t.TempDir(), true, args...)
}

// startNodeIn is startNode on the data directory dir with the node's default store (the
// embedded one, in dir), so that what `idgen seq create --data-dir dir` wrote beforehand is
// served.
func startNodeIn(t testing.TB, dir string, args ...string) *realNode {
	t.Helper()
	return startNodeWith(t, dir, false, args...)
}

// createSequence runs `idgen seq create NAME ARGS... --data-dir DIR` (before the node on DIR
// starts), failing the test with its output when it fails.
func createSequence(t testing.TB, dir, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append(append([]string{"seq", "create", name}, args...), "--data-dir", dir)
	out, err := exec.CommandContext(ctx, idgenBin(t), full...).CombinedOutput()
	if err != nil {
		t.Fatalf("idgen %s: %v\n%s", strings.Join(full, " "), err, out)
	}
}

func startNodeWith(t testing.TB, dir string, memory bool, args ...string) *realNode {
	t.Helper()
	idgenBin(t) // fail loudly before anything else when it is missing
	has := func(flag string) bool {
		for _, a := range args {
			if a == flag {
				return true
			}
		}
		return false
	}
	full := []string{"serve", "--admin-listen", "off", "--http-listen", "off", "--data-dir", dir}
	if !has("--listen") {
		full = append(full, "--listen", "127.0.0.1:0")
	}
	if memory && !has("--store") {
		full = append(full, "--store", "memory")
	}
	if !has("--shards") {
		full = append(full, "--shards", "2")
	}
	full = append(full, args...)
	n := &realNode{t: t, args: full}
	n.start(has("--tls-listen"))
	t.Cleanup(n.stop)
	return n
}

func (n *realNode) start(withTLS bool) {
	t := n.t
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), "idgen-*.log")
	if err != nil {
		t.Fatal(err)
	}
	n.log = logf
	cmd := exec.Command(idgenBin(t), n.args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting idgen: %v", err)
	}
	n.cmd = cmd
	n.exited = make(chan struct{})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody listens any more: keep draining
			}
		}
		close(lines)
	}()
	go func() { cmd.Wait(); close(n.exited) }()
	n.addr, n.tlsAddr = "", ""
	deadline := time.After(serverStartTimeout)
	for n.addr == "" || (withTLS && n.tlsAddr == "") {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("idgen exited before listening; log:\n%s", n.logTail())
			}
			if strings.HasPrefix(line, "listening with TLS on ") {
				n.tlsAddr = strings.TrimPrefix(line, "listening with TLS on ")
			} else if strings.HasPrefix(line, "listening on ") {
				n.addr = strings.TrimPrefix(line, "listening on ")
			}
		case <-deadline:
			n.kill()
			t.Fatalf("idgen did not print its addresses within %s; log:\n%s", serverStartTimeout, n.logTail())
		}
	}
}

func (n *realNode) logTail() string {
	data, _ := os.ReadFile(n.log.Name())
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

func (n *realNode) running() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL (a crash) and waits.
func (n *realNode) kill() {
	if n.running() {
		n.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-n.exited
}

func (n *realNode) signal(sig syscall.Signal) {
	if n.running() {
		n.cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM, then SIGKILL after 15 s.
func (n *realNode) stop() {
	if n.running() {
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(15 * time.Second):
			n.kill()
		}
	}
	n.log.Close()
}

// restart stops the node and starts it again with the same arguments, on the same
// addresses (retrying a moment while the ports are released).
func (n *realNode) restart(withTLS bool) {
	n.stop()
	args := append([]string(nil), n.args...)
	for i, a := range args {
		if a == "--listen" && i+1 < len(args) {
			args[i+1] = n.addr
		}
	}
	n.args = args
	n.start(withTLS)
}

// etcd is a single-member etcd on loopback.
type etcd struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startEtcd(t testing.TB) *etcd {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd not found on PATH (Debian: etcd-server): %v", err)
	}
	dir := t.TempDir()
	client, peer := freePort(t), freePort(t)
	cu := fmt.Sprintf("http://127.0.0.1:%d", client)
	pu := fmt.Sprintf("http://127.0.0.1:%d", peer)
	logf, _ := os.Create(filepath.Join(dir, "etcd.log"))
	cmd := exec.Command(bin, "--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
		"--initial-cluster", "t="+pu)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &etcd{url: fmt.Sprintf("127.0.0.1:%d", client), cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(e.done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-e.done
		}
		logf.Close()
	})
	// Healthy when /health says so.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if body, err := httpGet(e.url, "/health"); err == nil && strings.Contains(body, `"true"`) {
			return e
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			t.Fatalf("etcd not healthy within 20 s:\n%s", data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// httpGet is a minimal HTTP/1.0 GET (no net/http needed for one health check).
func httpGet(addr, path string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
	body, err := io.ReadAll(c)
	return string(body), err
}

// store is the --store URL for a prefix of e.
func (e *etcd) store(prefix string) string { return "etcd://" + e.url + "/" + prefix }

var (
	certsOnce sync.Once
	certsPath string
	certsErr  error
)

// certsDir holds the test kit's certificates (idgen-test-certs): $IDGEN_TEST_CERTS when
// set, else written once into a temporary directory by $IDGEN_TEST_CERTS_BIN, else by
// `cargo run -p idgen-testkit --bin idgen-test-certs`. It fails (never skips) when none
// works.
func certsDir(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("IDGEN_TEST_CERTS"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "ca.crt")); err != nil {
			t.Fatalf("IDGEN_TEST_CERTS=%s holds no ca.crt", dir)
		}
		return dir
	}
	certsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idgen-gotest-certs-")
		if err != nil {
			certsErr = err
			return
		}
		var cmd *exec.Cmd
		if bin := os.Getenv("IDGEN_TEST_CERTS_BIN"); bin != "" {
			cmd = exec.Command(bin, dir)
		} else {
			cmd = exec.Command("cargo", "run", "--quiet", "-p", "idgen-testkit", "--bin", "idgen-test-certs", "--", dir)
			cmd.Dir = repoRoot(t)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			certsErr = fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
			return
		}
		certsPath = dir
	})
	if certsErr != nil {
		t.Fatalf("cannot write the test certificates: %v", certsErr)
	}
	return certsPath
}

// ---- fake node ------------------------------------------------------------------------

func defaultHello() ServerHello {
	return ServerHello{Version: 2, EpochMs: 1767225600000, TimestampBits: 41, WorkerBits: 10,
		SequenceBits: 12, MaxBatch: 65536, MaxRequestFrame: 64, WorkerCount: 1}
}

// fakeNode is a tiny idgen node. It completes the handshake with hello (Version is the
// highest version it speaks), then answers every request as mode says:
//
//   - "serve": GET_IDS with IDS, GET_RANGES with RANGES (one run), PING with PONG, from one
//     counter shared by every connection, so IDs never repeat; GET_VALUES (version 3) with
//     VALUES of the sequences in seqs (see fakeSeq);
//   - "unavailable": ERROR status to every request (closing when the status closes);
//   - "garbage": bytes that are not a valid response;
//   - "silent": nothing at all;
//   - "slow_reader": serves, but with a small socket receive buffer and reading
//     slowly (a pause every slowReadEvery requests), so that a long pipeline of requests
//     fills the buffers and the client's write waits on the node;
//   - "deaf": after HELLO_OK reads nothing more (and answers nothing) until killed, with a
//     small socket receive buffer;
//   - "range_changed": on the first connection serves serveBefore requests, then answers
//     ERROR 305 and closes; later connections are greeted with helloAfter and served.
type fakeNode struct {
	t           testing.TB
	ln          net.Listener
	addr        string
	hello       ServerHello
	helloAfter  ServerHello
	mode        string
	status      Status
	serveBefore int
	tlsConf     *tls.Config
	killed      chan struct{}

	// uuidAnswer, when set, makes the answer to every GET_UUIDS (of count) instead.
	uuidAnswer func(count uint32) []byte

	mu          sync.Mutex
	seqs        map[string]*fakeSeq // GET_VALUES answers, by name
	valueReqs   []fakeValueReq      // every GET_VALUES received, in order
	nextID      uint64
	requests    int
	connections int
	idsByConn   [][]uint64
	versions    []uint16
	open        []net.Conn
	tlsSessions []tls.ConnectionState
	tlsFailures []error
	wg          sync.WaitGroup
}

func newFake(t testing.TB, hello ServerHello, mode string) *fakeNode {
	return startFake(t, &fakeNode{hello: hello, helloAfter: hello, mode: mode, status: StatusUnavailableLease})
}

func startFake(t testing.TB, f *fakeNode) *fakeNode {
	t.Helper()
	var lc net.ListenConfig
	if f.mode == "slow_reader" || f.mode == "deaf" {
		// Set on the listener, so that the accepted connection advertises a small window
		// from its first segment on.
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	listen := "127.0.0.1:0"
	if f.addr != "" { // a given address (a node that comes up where nothing listened)
		listen = f.addr
	}
	ln, err := lc.Listen(context.Background(), "tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	f.t, f.ln, f.addr = t, ln, ln.Addr().String()
	f.killed = make(chan struct{})
	if f.nextID == 0 {
		f.nextID = 1 << 40
	}
	if f.helloAfter.TimestampBits == 0 {
		f.helloAfter = f.hello
	}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.kill)
	return f
}

func (f *fakeNode) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.open = append(f.open, c)
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer c.Close()
			f.serve(c)
		}()
	}
}

func (f *fakeNode) serve(raw net.Conn) {
	var c net.Conn = raw
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if f.tlsConf != nil {
		tc := tls.Server(raw, f.tlsConf)
		if err := tc.Handshake(); err != nil {
			f.mu.Lock()
			f.tlsFailures = append(f.tlsFailures, err)
			f.mu.Unlock()
			return
		}
		f.mu.Lock()
		f.tlsSessions = append(f.tlsSessions, tc.ConnectionState())
		f.mu.Unlock()
		c = tc
	}
	var hello [13]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return
	}
	f.mu.Lock()
	index := f.connections
	f.connections++
	f.idsByConn = append(f.idsByConn, nil)
	h := f.hello
	if index > 0 {
		h = f.helloAfter
	}
	if offered := binary.BigEndian.Uint16(hello[11:]); offered < h.Version {
		h.Version = offered
	}
	f.versions = append(f.versions, h.Version)
	f.mu.Unlock()
	mode := f.mode
	if mode == "range_changed" && index > 0 {
		mode = "serve"
	}
	if _, err := c.Write(helloOKBytes(h)); err != nil {
		return
	}
	if mode == "deaf" {
		select {
		case <-f.killed:
		case <-time.After(30 * time.Second):
		}
		return
	}
	r := bufio.NewReader(c)
	for k := 0; k < 1000000; k++ { // bounded
		var head [4]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(head[:]))
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		f.mu.Lock()
		f.requests++
		f.mu.Unlock()
		if mode == "slow_reader" && k%slowReadEvery == slowReadEvery-1 {
			time.Sleep(slowReadPause)
		}
		switch {
		case mode == "unavailable":
			c.Write(errorBytes(f.status, "fake node says no"))
			if f.status.Closes() {
				return
			}
		case mode == "garbage":
			c.Write([]byte("\x00\x00\x00\x09\x85garbage!"))
		case mode == "range_changed" && k >= f.serveBefore:
			c.Write(errorBytes(StatusRangeChanged, "worker range changed"))
			return
		case mode == "serve" || mode == "range_changed" || mode == "slow_reader":
			out := f.answer(body, index, h)
			c.Write(out)
			if out[4] == opError && Status(binary.BigEndian.Uint16(out[5:])).Closes() {
				return
			}
		}
		// "silent": nothing
	}
}

// A "slow_reader" fake pauses slowReadPause after every slowReadEvery requests.
const (
	slowReadEvery = 128
	slowReadPause = 20 * time.Millisecond
)

func (f *fakeNode) answer(body []byte, index int, h ServerHello) []byte {
	switch body[0] {
	case opPing:
		return append([]byte{0, 0, 0, 9, opPong}, body[1:9]...)
	case opGetIDs, opGetRanges:
		count := binary.BigEndian.Uint32(body[1:])
		if count == 0 {
			return errorBytes(StatusInvalidCount, "count 0")
		}
		if count > h.MaxBatch {
			return errorBytes(StatusBatchTooLarge, "batch too large")
		}
		if body[0] == opGetRanges && h.Version < 2 {
			return errorBytes(StatusUnknownOpcode, "unknown opcode")
		}
		f.mu.Lock()
		first := f.nextID
		f.nextID += uint64(count)
		for i := uint64(0); i < uint64(count); i++ {
			f.idsByConn[index] = append(f.idsByConn[index], first+i)
		}
		f.mu.Unlock()
		if body[0] == opGetRanges {
			b := binary.BigEndian.AppendUint32(nil, 9+12)
			b = append(b, opRanges)
			b = binary.BigEndian.AppendUint32(b, count)
			b = binary.BigEndian.AppendUint32(b, 1)
			b = binary.BigEndian.AppendUint64(b, first)
			return binary.BigEndian.AppendUint32(b, count)
		}
		b := binary.BigEndian.AppendUint32(nil, 5+8*count)
		b = append(b, opIDs)
		b = binary.BigEndian.AppendUint32(b, count)
		for i := uint64(0); i < uint64(count); i++ {
			b = binary.BigEndian.AppendUint64(b, first+i)
		}
		return b
	case opGetValues:
		if h.Version < 3 {
			return errorBytes(StatusUnknownOpcode, "unknown opcode")
		}
		return f.answerValues(body, h)
	case opGetUUIDs:
		if h.Version < 4 {
			return errorBytes(StatusUnknownOpcode, "unknown opcode")
		}
		count := binary.BigEndian.Uint32(body[1:])
		if count == 0 {
			return errorBytes(StatusInvalidCount, "count 0")
		}
		if count > h.MaxBatch {
			return errorBytes(StatusBatchTooLarge, "batch too large")
		}
		if f.uuidAnswer != nil {
			return f.uuidAnswer(count)
		}
		f.mu.Lock()
		first := f.nextID
		f.nextID += uint64(count)
		uuids := make([]UUID, count)
		for i := range uuids {
			id := first + uint64(i)
			f.idsByConn[index] = append(f.idsByConn[index], id)
			uuids[i] = fakeUUIDOf(h, id, id*0x9E3779B97F4A7C15)
		}
		f.mu.Unlock()
		return uuidsBytes(uuids)
	}
	return errorBytes(StatusUnknownOpcode, "unknown opcode")
}

// fakeSeq is a named sequence of a fake node: values next, next+step, ... up to max, in
// mode. With status set, every GET_VALUES of it is answered ERROR status (closing the
// connection when the status closes); with raw set, with those bytes instead; with delay
// set, the answer waits that long first.
type fakeSeq struct {
	mode      SequenceMode
	next, max uint64
	step      uint64
	status    Status
	raw       []byte
	delay     time.Duration
}

// fakeValueReq is one GET_VALUES a fake node received.
type fakeValueReq struct {
	name  string
	count uint32
}

var fakeSeqName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// addSeq creates (or replaces) a sequence of the fake: values from 1 (or start), step 1,
// no maximum below 2^63.
func (f *fakeNode) addSeq(name string, mode SequenceMode, start uint64) *fakeSeq {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seqs == nil {
		f.seqs = make(map[string]*fakeSeq)
	}
	s := &fakeSeq{mode: mode, next: start, max: 1<<63 - 1, step: 1}
	f.seqs[name] = s
	return s
}

// setSeq changes a sequence under the fake's lock.
func (f *fakeNode) setSeq(name string, change func(*fakeSeq)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f.seqs[name])
}

// dropSeq removes a sequence: later GET_VALUES of it are UNKNOWN_SEQUENCE.
func (f *fakeNode) dropSeq(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.seqs, name)
}

// valueRequests is a copy of the GET_VALUES received so far.
func (f *fakeNode) valueRequests() []fakeValueReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeValueReq(nil), f.valueReqs...)
}

func (f *fakeNode) answerValues(body []byte, h ServerHello) []byte {
	if len(body) < 6 || len(body) > 69 {
		return errorBytes(StatusBadFrame, "GET_VALUES length")
	}
	count := binary.BigEndian.Uint32(body[1:])
	name := string(body[5:])
	f.mu.Lock()
	f.valueReqs = append(f.valueReqs, fakeValueReq{name, count})
	f.mu.Unlock()
	switch {
	case count == 0:
		return errorBytes(StatusInvalidCount, "count 0")
	case count > h.MaxBatch || count > MaxValuesPerCall:
		return errorBytes(StatusBatchTooLarge, "batch too large")
	case !fakeSeqName.MatchString(name):
		return errorBytes(StatusInvalidSequenceName, "bad sequence name")
	}
	f.mu.Lock()
	s, ok := f.seqs[name]
	var delay time.Duration
	if ok {
		delay = s.delay
	}
	f.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !ok:
		return errorBytes(StatusUnknownSequence, "no sequence "+name+" in this namespace")
	case s.status != 0:
		return errorBytes(s.status, "fake sequence says no")
	case s.raw != nil:
		return s.raw
	case s.next > s.max || (s.max-s.next)/s.step+1 < uint64(count):
		return errorBytes(StatusSequenceUsedUp, "sequence "+name+" reached its maximum")
	}
	b := binary.BigEndian.AppendUint32(nil, 6+8*count)
	b = append(b, opValues, byte(s.mode))
	b = binary.BigEndian.AppendUint32(b, count)
	for i := uint32(0); i < count; i++ {
		b = binary.BigEndian.AppendUint64(b, s.next)
		s.next += s.step
	}
	return b
}

// seqHello is a version 3 node's HELLO_OK (the default request frame limit of 128).
// fakeUUIDOf is the version 7 UUID a node of h's layout makes from id with random in its
// random bits (PROTOCOL.md section 3.7), written out with math/big, independently of the
// client's decoder.
func fakeUUIDOf(h ServerHello, id, random uint64) UUID {
	lowBits := uint(h.WorkerBits) + uint(h.SequenceBits)
	randomBits := 74 - lowBits
	one := big.NewInt(1)
	mask := func(bits uint) *big.Int { return new(big.Int).Sub(new(big.Int).Lsh(one, bits), one) }
	low := new(big.Int).And(new(big.Int).SetUint64(id), mask(lowBits))
	payload := new(big.Int).Lsh(low, randomBits)
	payload.Or(payload, new(big.Int).And(new(big.Int).SetUint64(random), mask(randomBits)))
	u := new(big.Int).Lsh(new(big.Int).SetUint64(h.EpochMs+id>>lowBits), 80)
	u.Or(u, new(big.Int).Lsh(big.NewInt(7), 76))
	u.Or(u, new(big.Int).Lsh(new(big.Int).Rsh(payload, 62), 64))
	u.Or(u, new(big.Int).Lsh(big.NewInt(2), 62))
	u.Or(u, new(big.Int).And(payload, mask(62)))
	var out UUID
	u.FillBytes(out[:])
	return out
}

// uuidsBytes is a UUIDS frame of uuids.
func uuidsBytes(uuids []UUID) []byte {
	b := binary.BigEndian.AppendUint32(nil, 5+16*uint32(len(uuids)))
	b = append(b, opUUIDs)
	b = binary.BigEndian.AppendUint32(b, uint32(len(uuids)))
	for _, u := range uuids {
		b = append(b, u[:]...)
	}
	return b
}

func uuidHello() ServerHello {
	h := defaultHello()
	h.Version, h.MaxRequestFrame = 4, 128
	return h
}

func seqHello() ServerHello {
	h := defaultHello()
	h.Version, h.MaxRequestFrame = 3, 128
	return h
}

func (f *fakeNode) counts() (connections, requests int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connections, f.requests
}

// kill stops accepting and cuts every open connection (as a crashed node would).
func (f *fakeNode) kill() {
	f.ln.Close()
	f.mu.Lock()
	open := f.open
	f.open = nil
	select {
	case <-f.killed:
	default:
		close(f.killed)
	}
	f.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
	f.wg.Wait()
}

func helloOKBytes(h ServerHello) []byte {
	b := []byte{0, 0, 0, 33, opHelloOK}
	b = binary.BigEndian.AppendUint16(b, h.Version)
	b = binary.BigEndian.AppendUint64(b, h.EpochMs)
	b = append(b, h.TimestampBits, h.WorkerBits, h.SequenceBits, h.RegionBits)
	for _, v := range []uint32{h.MaxBatch, h.MaxRequestFrame, h.WorkerFirst, h.WorkerCount} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return binary.BigEndian.AppendUint16(b, h.Shard)
}

func errorBytes(status Status, msg string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(3+len(msg)))
	b = append(b, opError)
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	return append(b, msg...)
}

// serverTLS is a server-side configuration with certs/<name>.crt and .key offering ALPN
// idgen/1; with clientCA it requires client certificates that chain to it.
func serverTLS(t testing.TB, certs, name, clientCA string) *tls.Config {
	cert, err := tls.LoadX509KeyPair(filepath.Join(certs, name+".crt"), filepath.Join(certs, name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"idgen/1"}}
	if clientCA != "" {
		pem, err := os.ReadFile(filepath.Join(certs, clientCA))
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return conf
}

func unusedAddr(t testing.TB) string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }

func newClient(t testing.TB, opts Options) *Client {
	t.Helper()
	c, err := NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func bg(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func nodeState(c *Client, addr string) NodeState {
	for _, s := range c.Nodes() {
		if s.Addr == addr {
			return s
		}
	}
	panic("no node " + addr)
}

// checkUnique fails on any ID seen twice.
func checkUnique(t testing.TB, batches ...[]uint64) int {
	t.Helper()
	seen := make(map[uint64]struct{})
	n := 0
	for _, b := range batches {
		for _, id := range b {
			if _, dup := seen[id]; dup {
				t.Fatalf("ID %d handed out twice", id)
			}
			seen[id] = struct{}{}
			n++
		}
	}
	return n
}

func increasing(ids []uint64) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}
