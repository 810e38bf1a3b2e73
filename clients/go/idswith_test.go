package idgen

import (
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestKeyNodeIsFNV1a64OfTheKeyModuloTheNodes(t *testing.T) {
	for _, c := range []struct {
		key  string
		hash uint64
	}{
		{"", 0xcbf29ce484222325},
		{"a", 0xaf63dc4c8601ec8c},
		{"order-42", 0x7d1deb86a05662d4},
		{"k1", 0x08be0f07b56224c1},
	} {
		if got := fnv1a64(c.key); got != c.hash {
			t.Errorf("fnv1a64(%q) = %#x, want %#x", c.key, got, c.hash)
		}
	}
	for _, c := range []struct {
		key   string
		count int
		want  int
	}{
		{"order-42", 3, 2}, {"order-42", 2, 0}, {"k1", 2, 1}, {"a", 3, 1}, {"retry-me", 3, 2}, {"a", 1, 0},
	} {
		if got := keyNodeIndex(c.key, c.count); got != c.want {
			t.Errorf("keyNodeIndex(%q, %d) = %d, want %d", c.key, c.count, got, c.want)
		}
	}
	c := newClient(t, Options{Nodes: []string{"n0:1", "n1:1", "n2:1"}})
	if got := c.KeyNode("order-42"); got != "n2:1" {
		t.Fatalf("KeyNode(order-42) = %s, want n2:1", got)
	}
}

func TestGetIDsWithEncodingAndKeyChecks(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{hex.EncodeToString(appendGetIDsWith(nil, 3, false, 0, "", false)), "00000006070000000300"},
		{hex.EncodeToString(appendGetIDsWith(nil, 2, true, 4196401153, "", false)), "0000000e07000000020100000000fa200001"},
		{hex.EncodeToString(appendGetIDsWith(nil, 5, false, 0, "order-42", false)), "0000000f070000000502086f726465722d3432"},
		{hex.EncodeToString(appendGetIDsWith(nil, 1, false, 0, "", true)), "00000006070000000104"},
		{hex.EncodeToString(appendGetIDsWith(nil, 1, true, 1, "k", true)), "00000010070000000107000000000000000101" + "6b"},
	} {
		if c.got != c.want {
			t.Errorf("encoded %s, want %s", c.got, c.want)
		}
	}
	for _, ok := range []string{"!", "~", "order-42", strings.Repeat("k", 64)} {
		if err := checkIdempotencyKey(ok); err != nil {
			t.Errorf("key %q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "é", "tab\t", strings.Repeat("k", 65)} {
		if err := checkIdempotencyKey(bad); err == nil {
			t.Errorf("key %q accepted", bad)
		}
	}
	// Bad arguments fail before anything is sent.
	c := newClient(t, Options{Nodes: []string{unusedAddr(t)}})
	ctx := bg(t, 5*time.Second)
	for _, o := range []IDOptions{{IdempotencyKey: "a b"}, {IdempotencyKey: strings.Repeat("k", 65)}, {After: 1 << 63}} {
		if _, err := c.NextIDsWith(ctx, 1, o); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", o, err)
		}
	}
	if _, err := c.NextMaskedIDs(ctx, 0, IDOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("n = 0: %v", err)
	}
}

func TestMaskedStringFormNeedsNoKey(t *testing.T) {
	ring, err := ParseMaskKeys("4:" + testKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{0, 1, 123456789, 1<<63 - 1} {
		m, err := ring.Mask(id, DefaultMaskWidth)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ring.MaskString(id, DefaultMaskWidth)
		if err != nil {
			t.Fatal(err)
		}
		if got := maskedString(4, m); got != s {
			t.Errorf("maskedString(4, %d) = %s, want %s", m, got, s)
		}
	}
}

func TestIDsWithOnAnOlderNodeIsAVersionErrorAndSendsNothing(t *testing.T) {
	h := defaultHello()
	h.Version = 4
	f := newFake(t, h, "serve")
	c := newClient(t, Options{Nodes: []string{f.addr}})
	ctx := bg(t, 5*time.Second)
	_, err := c.NextIDsWith(ctx, 3, IDOptions{After: 5})
	var ve *VersionError
	if !errors.As(err, &ve) || !errors.Is(err, ErrIDsWithUnsupported) || ve.Node != f.addr || ve.Version != 4 || ve.Required != 5 ||
		!strings.Contains(err.Error(), "too old") {
		t.Fatalf("NextIDsWith on a v4 node: %v", err)
	}
	if _, err := c.NextMaskedIDs(ctx, 3, IDOptions{}); !errors.Is(err, ErrIDsWithUnsupported) {
		t.Fatalf("NextMaskedIDs on a v4 node: %v", err)
	}
	if _, requests := f.counts(); requests != 0 {
		t.Fatalf("%d requests sent", requests)
	}
	if st := nodeState(c, f.addr); st.Down {
		t.Fatal("the node was marked down")
	}
	c4 := newClient(t, Options{Nodes: []string{f.addr}, MaxVersion: 4})
	if _, err := c4.NextIDsWith(ctx, 1, IDOptions{}); !errors.Is(err, ErrIDsWithUnsupported) {
		t.Fatalf("MaxVersion 4: %v", err)
	}
}

func TestAKeyedCallGoesToItsKeysNodeOnlyAndIsNotRetriedElsewhere(t *testing.T) {
	h := defaultHello()
	h.Version = 5
	a := newFake(t, h, "unavailable") // 300 UNAVAILABLE_LEASE: retry elsewhere
	b := newFake(t, h, "unavailable")
	c := newClient(t, Options{Nodes: []string{a.addr, b.addr}})
	ctx := bg(t, 5*time.Second)
	// "k1" hashes to node 1 of 2.
	_, err := c.NextIDsWith(ctx, 2, IDOptions{IdempotencyKey: "k1"})
	var ke *KeyedError
	if !errors.As(err, &ke) || !errors.Is(err, ErrKeyedNotRetried) || !errors.Is(err, StatusUnavailableLease) || ke.Node != b.addr ||
		!strings.Contains(err.Error(), "not retried on another node") {
		t.Fatalf("keyed call: %v", err)
	}
	if conns, requests := a.counts(); conns != 0 || requests != 0 {
		t.Fatalf("the other node saw %d connections, %d requests", conns, requests)
	}
	if _, requests := b.counts(); requests != 1 {
		t.Fatalf("the key's node saw %d requests", requests)
	}
	// Without a key, the call fails over to the other node (both refuse here).
	if _, err := c.NextIDsWith(ctx, 2, IDOptions{After: 1}); errors.Is(err, ErrKeyedNotRetried) {
		t.Fatalf("unkeyed call: %v", err)
	}
	if conns, _ := a.counts(); conns == 0 {
		t.Fatal("an unkeyed call did not fail over")
	}
}

func TestRealNodeIDsAfterAnIDSeen(t *testing.T) {
	n := startNode(t)
	c := newClient(t, Options{Nodes: []string{n.addr}})
	ctx := bg(t, 10*time.Second)
	first, err := c.NextIDsWith(ctx, 5, IDOptions{})
	if err != nil || len(first) != 5 || !increasing(first) {
		t.Fatalf("%v %v", first, err)
	}
	next, err := c.NextIDsWith(ctx, 5, IDOptions{After: first[4]})
	if err != nil || len(next) != 5 || !increasing(next) || next[0] <= first[4] {
		t.Fatalf("after %d: %v %v", first[4], next, err)
	}
	as64, err := c.NextIDsWithInt64(ctx, 2, IDOptions{After: next[4]})
	if err != nil || len(as64) != 2 || as64[0] <= int64(next[4]) || as64[1] <= as64[0] {
		t.Fatalf("NextIDsWithInt64 after %d: %v %v", next[4], as64, err)
	}
	// An ID 400 ms in the future: answered after a wait, and above it.
	l, err := c.Layout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shift := uint(l.WorkerBits) + uint(l.SequenceBits)
	future := (uint64(time.Now().UnixMilli()) + 400 - l.EpochMs) << shift
	other := newClient(t, Options{Nodes: []string{n.addr}}) // another connection
	start := time.Now()
	ids, err := other.NextIDsWith(ctx, 3, IDOptions{After: future})
	waited := time.Since(start)
	if err != nil || len(ids) != 3 || ids[0] <= future {
		t.Fatalf("after a future ID %d: %v %v", future, ids, err)
	}
	if waited < 200*time.Millisecond {
		t.Fatalf("answered after %v, want a wait of about 400 ms", waited)
	}
	// Far in the future (beyond 60 s): 205 INVALID_OPTION, the connection stays.
	far := (uint64(time.Now().UnixMilli()) + 3_600_000 - l.EpochMs) << shift
	if _, err := c.NextIDsWith(ctx, 1, IDOptions{After: far}); !errors.Is(err, StatusInvalidOption) {
		t.Fatalf("far after: %v", err)
	}
	if _, err := c.NextIDs(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

func TestRealNodeIdempotencyKey(t *testing.T) {
	n := startNode(t, "--idempotency-window", "30s")
	c := newClient(t, Options{Nodes: []string{n.addr}})
	ctx := bg(t, 10*time.Second)
	a, err := c.NextIDsWith(ctx, 3, IDOptions{IdempotencyKey: "order-42"})
	if err != nil || len(a) != 3 {
		t.Fatalf("%v %v", a, err)
	}
	other := newClient(t, Options{Nodes: []string{n.addr}}) // another connection
	b, err := other.NextIDsWith(ctx, 3, IDOptions{IdempotencyKey: "order-42"})
	if err != nil || len(b) != 3 || b[0] != a[0] || b[1] != a[1] || b[2] != a[2] {
		t.Fatalf("again: %v %v, want %v", b, err, a)
	}
	_, err = c.NextIDsWith(ctx, 4, IDOptions{IdempotencyKey: "order-42"})
	var se *ServerError
	if !errors.As(err, &se) || se.Status != StatusIdempotencyKeyReused || int(se.Status) != 206 {
		t.Fatalf("another count with the key: %v", err)
	}
	fresh, err := c.NextIDsWith(ctx, 3, IDOptions{IdempotencyKey: "order-43"})
	if err != nil || fresh[0] <= a[2] {
		t.Fatalf("another key: %v %v", fresh, err)
	}
}

func TestRealNodeMaskedIDs(t *testing.T) {
	t.Setenv(MaskKeysEnv, "4:"+testKey)
	n := startNode(t)
	ring, err := ParseMaskKeys("4:" + testKey)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, Options{Nodes: []string{n.addr}})
	ctx := bg(t, 10*time.Second)
	l, err := c.Layout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	width := int(l.IDBits())
	before, err := c.NextID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.NextMaskedIDs(ctx, 5, IDOptions{After: before})
	if err != nil || m.KeyID != 4 || len(m.Values) != 5 || len(m.Strings) != 5 {
		t.Fatalf("%+v %v", m, err)
	}
	for i, v := range m.Int64s() {
		if v < 0 || uint64(v) != m.Values[i] {
			t.Fatalf("Int64s()[%d] = %d, value %d", i, v, m.Values[i])
		}
	}
	last := before
	for i, v := range m.Values {
		id, err := ring.UnmaskWithKey(v, m.KeyID, width)
		if err != nil {
			t.Fatal(err)
		}
		fromString, err := ring.UnmaskString(m.Strings[i], width)
		if err != nil || fromString != id || len(m.Strings[i]) != MaskedStringLen || m.Strings[i][0] != '4' {
			t.Fatalf("string %q: %d %v, want %d", m.Strings[i], fromString, err, id)
		}
		if id <= last {
			t.Fatalf("unmasked %d does not increase on %d", id, last)
		}
		last = id
	}
	after, err := c.NextID(ctx)
	if err != nil || after <= last {
		t.Fatalf("next ID %d %v after the masked ones (last %d)", after, err, last)
	}
}

func TestRealNodeWithoutTheFeaturesAnswersInvalidOption(t *testing.T) {
	t.Setenv(MaskKeysEnv, "") // restored after the test
	os.Unsetenv(MaskKeysEnv)
	t.Setenv("IDGEN_IDEMPOTENCY_WINDOW", "0s")
	n := startNode(t)
	c := newClient(t, Options{Nodes: []string{n.addr}})
	ctx := bg(t, 10*time.Second)
	if _, err := c.NextIDsWith(ctx, 2, IDOptions{IdempotencyKey: "order-42"}); !errors.Is(err, StatusInvalidOption) {
		t.Fatalf("a key without an idempotency window: %v", err)
	}
	if _, err := c.NextMaskedIDs(ctx, 2, IDOptions{}); !errors.Is(err, StatusInvalidOption) {
		t.Fatalf("masked without masking keys: %v", err)
	}
	if st := nodeState(c, n.addr); st.Down || !st.Connected {
		t.Fatalf("205 marked the node down or dropped the connection: %+v", st)
	}
	if ids, err := c.NextIDs(ctx, 2); err != nil || len(ids) != 2 {
		t.Fatal(err)
	}
}
