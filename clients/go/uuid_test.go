package idgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUUIDsFromAVersion4NodeAreMadeFromTheIDsItSent(t *testing.T) {
	h := uuidHello()
	h.MaxBatch = 10
	f := newFake(t, h, "serve")
	c := newClient(t, Options{Nodes: []string{f.addr}})
	ctx := bg(t, 5*time.Second)
	one, err := c.NextUUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	many, err := c.NextUUIDs(ctx, 25) // above max_batch: 10 + 10 + 5, pipelined, joined
	if err != nil || len(many) != 25 {
		t.Fatalf("%v %d", err, len(many))
	}
	got := append([]UUID{one}, many...)
	layout := h.Layout()
	f.mu.Lock()
	sent := append([]uint64(nil), f.idsByConn[0]...)
	f.mu.Unlock()
	if len(sent) != len(got) {
		t.Fatalf("the fake sent %d IDs, the client has %d UUIDs", len(sent), len(got))
	}
	for i, u := range got {
		if u.Version() != 7 || u[8]>>6 != 0b10 {
			t.Fatalf("%s: version %d, variant %02b", u, u.Version(), u[8]>>6)
		}
		if i > 0 && bytes.Compare(got[i-1][:], u[:]) >= 0 {
			t.Fatalf("not increasing at %d: %s then %s", i, got[i-1], u)
		}
		if want := fakeUUIDOf(h, sent[i], sent[i]*0x9E3779B97F4A7C15); u != want {
			t.Fatalf("UUID %d is %s, want %s", i, u, want)
		}
		p, err := layout.DecodeUUID(u)
		if err != nil || p.ID != sent[i] {
			t.Fatalf("%s decodes to %d (%v), want %d", u, p.ID, err, sent[i])
		}
	}
	st := c.Stats()
	if st.UUIDRequests != 4 || st.UUIDs != 26 || st.Connects != 1 {
		t.Fatalf("stats %+v", st)
	}
	// IDs still flow on the same version 4 connection.
	if _, err := c.NextIDs(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if f.versions[0] != 4 {
		t.Fatalf("negotiated %d", f.versions[0])
	}
}

func TestANodeBelowVersion4IsRefusedForUUIDsWithoutSending(t *testing.T) {
	for _, version := range []uint16{1, 2, 3} {
		h := uuidHello()
		h.Version = version
		old := newFake(t, h, "serve")
		newer := newFake(t, uuidHello(), "serve")
		c := newClient(t, Options{Nodes: []string{old.addr, newer.addr}})
		_, err := c.NextUUIDs(bg(t, 5*time.Second), 3)
		var ve *VersionError
		if !errors.As(err, &ve) || ve.Node != old.addr || ve.Version != version || ve.Required != 4 ||
			!errors.Is(err, ErrUUIDsUnsupported) || errors.Is(err, ErrSequencesUnsupported) ||
			!strings.Contains(err.Error(), fmt.Sprintf("speaks protocol version %d; UUIDs need version 4", version)) {
			t.Fatalf("v%d: got %v", version, err)
		}
		if _, reqs := old.counts(); reqs != 0 {
			t.Fatalf("v%d: %d requests sent", version, reqs)
		}
		if conns, _ := newer.counts(); conns != 0 || nodeState(c, old.addr).Down || c.Stats().Failovers != 0 {
			t.Fatalf("v%d: another node was tried or the node marked down: %+v", version, c.Stats())
		}
		if _, err := c.NextIDs(bg(t, 5*time.Second), 3); err != nil {
			t.Fatalf("v%d: %v", version, err)
		}
	}
	// A client that offers no more than version 3 says so, before connecting.
	f := newFake(t, uuidHello(), "serve")
	c := newClient(t, Options{Nodes: []string{f.addr}, MaxVersion: 3})
	_, err := c.NextUUID(bg(t, 5*time.Second))
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Node != "" || ve.Version != 3 || !errors.Is(err, ErrUUIDsUnsupported) ||
		!strings.Contains(err.Error(), "Options.MaxVersion); UUIDs need version 4") {
		t.Fatalf("MaxVersion 3: %v", err)
	}
	if conns, _ := f.counts(); conns != 0 {
		t.Fatalf("connected: %d", conns)
	}
}

func TestUUIDCountsOutsideTheBoundAreRefusedBeforeSending(t *testing.T) {
	f := newFake(t, uuidHello(), "serve")
	c := newClient(t, Options{Nodes: []string{f.addr}})
	for _, n := range []int{0, -1, maxIDsPerCall + 1} {
		if _, err := c.NextUUIDs(bg(t, time.Second), n); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("n = %d: %v", n, err)
		}
	}
	if conns, _ := f.counts(); conns != 0 {
		t.Fatalf("connected: %d", conns)
	}
}

func TestBadUUIDSAnswersAreProtocolErrorsAndFailOver(t *testing.T) {
	h := uuidHello()
	good := make([]UUID, 3)
	for i := range good {
		good[i] = fakeUUIDOf(h, 1<<40+uint64(i), 5)
	}
	version4 := good[0]
	version4[6] = version4[6]&0x0F | 0x40
	variant11 := good[0]
	variant11[8] |= 0xC0
	cases := map[string]func(n uint32) []byte{
		"too few":    func(n uint32) []byte { return uuidsBytes(good[:n-1]) },
		"too many":   func(n uint32) []byte { return uuidsBytes(good[:n+1]) },
		"version 4":  func(n uint32) []byte { return uuidsBytes(append([]UUID{version4}, good[1:n]...)) },
		"variant 11": func(n uint32) []byte { return uuidsBytes(append([]UUID{variant11}, good[1:n]...)) },
		"decreasing": func(n uint32) []byte { return uuidsBytes([]UUID{good[1], good[0]}) },
		"IDS instead": func(n uint32) []byte {
			return append(append(binary4(5+8*n), opIDs), append(binary4(n), make([]byte, 8*n)...)...)
		},
		"count disagrees with length": func(n uint32) []byte {
			b := uuidsBytes(good[:n])
			b[8]++
			return b
		},
	}
	for name, answer := range cases {
		bad := newFake(t, h, "serve")
		bad.uuidAnswer = answer
		c := newClient(t, Options{Nodes: []string{bad.addr}})
		_, err := c.NextUUIDs(bg(t, 5*time.Second), 2)
		var pe *ProtocolError
		if !errors.As(err, &pe) || !errors.Is(err, ErrProtocol) {
			t.Fatalf("%s: got %v", name, err)
		}
		if !nodeState(c, bad.addr).Down {
			t.Fatalf("%s: the node is not marked down", name)
		}
		healthy := newFake(t, h, "serve")
		c = newClient(t, Options{Nodes: []string{bad.addr, healthy.addr}})
		if u, err := c.NextUUIDs(bg(t, 5*time.Second), 2); err != nil || len(u) != 2 || c.Stats().Failovers != 1 {
			t.Fatalf("%s: after failover %v %d %+v", name, err, len(u), c.Stats())
		}
	}
}

func binary4(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

func TestUUIDsMustIncreaseAcrossTheFramesOfOneConnection(t *testing.T) {
	h := uuidHello()
	same := fakeUUIDOf(h, 1<<40, 0)
	f := newFake(t, h, "serve")
	f.uuidAnswer = func(n uint32) []byte { return uuidsBytes([]UUID{same}) }
	c := newClient(t, Options{Nodes: []string{f.addr}})
	if u, err := c.NextUUID(bg(t, 5*time.Second)); err != nil || u != same {
		t.Fatalf("%v %s", err, u)
	}
	_, err := c.NextUUID(bg(t, 5*time.Second))
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "does not increase") {
		t.Fatalf("got %v", err)
	}
}

func TestUUIDTextForms(t *testing.T) {
	const text = "019b71b4-4c7b-7800-8000-123456789abc"
	u, err := ParseUUID(strings.ToUpper(text))
	if err != nil || u.String() != text {
		t.Fatalf("%v %s", err, u)
	}
	j, err := json.Marshal(map[string]UUID{"id": u})
	if err != nil || string(j) != `{"id":"`+text+`"}` {
		t.Fatalf("%v %s", err, j)
	}
	var back map[string]UUID
	if err := json.Unmarshal(j, &back); err != nil || back["id"] != u {
		t.Fatalf("%v %v", err, back)
	}
	for _, bad := range []string{"", "019b71b44c7b78008000123456789abc", "{" + text + "}",
		"urn:uuid:" + text, text[:35] + "g", text[:8] + "+" + text[9:], text + "0"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestDecodeUUID(t *testing.T) {
	// PROTOCOL.md 11.1 and 11.6: the layout of the worked examples and its UUIDs.
	l := Layout{EpochMs: 1704067200000, TimestampBits: 41, WorkerBits: 10, SequenceBits: 12}
	first, _ := ParseUUID("019b71b4-4c7b-7800-8000-123456789abc")
	p, err := l.DecodeUUID(first)
	if err != nil || p.ID != 264543142405996544 || p.UnixMs != 1767139200123 || p.Worker != 512 || p.Sequence != 0 {
		t.Fatalf("%v %+v", err, p)
	}
	second, _ := ParseUUID("019b71b4-4c7b-7800-801f-edcba9876543")
	if p, err := l.DecodeUUID(second); err != nil || p.ID != 264543142405996545 || p.Sequence != 1 {
		t.Fatalf("%v %+v", err, p)
	}
	for text, why := range map[string]string{
		"019b71b4-4c7b-4800-8000-123456789abc": "version 4",
		"019b71b4-4c7b-7800-c000-123456789abc": "variant",
		"00000000-0001-7000-8000-000000000000": "before the epoch",
		"ffffffff-ffff-7000-8000-000000000000": "past the layout",
	} {
		u, _ := ParseUUID(text)
		if _, err := l.DecodeUUID(u); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want %q", text, err, why)
		}
	}
	// The inverse of the mapping, over layouts whose worker ‖ sequence is short and long.
	for _, bits := range [][3]uint8{{41, 10, 12}, {39, 8, 16}, {31, 16, 16}, {1, 31, 31}, {55, 4, 4}} {
		h := defaultHello()
		h.TimestampBits, h.WorkerBits, h.SequenceBits = bits[0], bits[1], bits[2]
		// Times within 2^40 ms of the epoch: a UUID's 48-bit time holds them.
		keep := uint64(1)<<(uint(bits[1])+uint(bits[2])+40) - 1
		for _, id := range []uint64{0, 1, (1<<63 - 1) & keep, 0x0123456789ABCDEF & keep} {
			u := fakeUUIDOf(h, id, ^uint64(0))
			p, err := h.Layout().DecodeUUID(u)
			want, _ := h.Layout().Decode(id)
			if err != nil || p.ID != id || p.IDParts != want {
				t.Fatalf("layout %v, ID %d: %v %+v", bits, id, err, p)
			}
		}
	}
}
