package idgen

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository root (clients/go is two levels below it).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func loadJSON(t testing.TB, rel string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatalf("reading %s: %v", rel, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("parsing %s: %v", rel, err)
	}
}

type vector struct {
	Name       string         `json:"name"`
	Direction  string         `json:"direction"`
	Hex        string         `json:"hex"`
	Decoded    map[string]any `json:"decoded"`
	Error      *vectorError   `json:"error"`
	Incomplete bool           `json:"incomplete"`
	Consumed   *int           `json:"consumed"`
	MaxFrame   uint32         `json:"max_frame"`
	Connection string         `json:"connection"`
	Version    *uint16        `json:"version"` // established connections: the negotiated version (absent: 1)
	Limits     struct {
		MaxRequestFrame uint32 `json:"max_request_frame"`
		MaxBatch        uint32 `json:"max_batch"`
	} `json:"limits"`
}

type vectorError struct {
	Status int    `json:"status"`
	Name   string `json:"name"`
	Closes bool   `json:"closes"`
}

func loadVectors(t *testing.T) []vector {
	var vs []vector
	loadJSON(t, "protocol/tests/vectors.json", &vs)
	if len(vs) < 50 {
		t.Fatalf("only %d vectors", len(vs))
	}
	// Version 4's cases (GET_UUIDS, UUIDS): a version 4 client passes both files.
	var v4 []vector
	loadJSON(t, "protocol/tests/vectors_v4.json", &v4)
	if len(v4) < 10 {
		t.Fatalf("only %d version 4 vectors", len(v4))
	}
	// Version 5's cases (GET_IDS_WITH, MASKED_IDS, statuses 205-207).
	var v5 []vector
	loadJSON(t, "protocol/tests/vectors_v5.json", &v5)
	if len(v5) < 10 {
		t.Fatalf("only %d version 5 vectors", len(v5))
	}
	return append(append(vs, v4...), v5...)
}

func (v vector) bytes(t *testing.T) []byte {
	b, err := hex.DecodeString(v.Hex)
	if err != nil {
		t.Fatalf("%s: bad hex: %v", v.Name, err)
	}
	return b
}

func num(t *testing.T, v any) uint64 {
	t.Helper()
	switch x := v.(type) {
	case float64:
		return uint64(x)
	case string:
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			t.Fatalf("bad number %q", x)
		}
		return n
	}
	t.Fatalf("not a number: %#v", v)
	return 0
}

func encodeRequest(t *testing.T, d map[string]any) []byte {
	switch d["op"] {
	case "HELLO":
		return appendHello(nil, uint16(num(t, d["min_version"])), uint16(num(t, d["max_version"])))
	case "GET_IDS":
		return appendGetIDs(nil, uint32(num(t, d["count"])))
	case "GET_RANGES":
		return appendGetRanges(nil, uint32(num(t, d["count"])))
	case "PING":
		return appendPing(nil, num(t, d["token"]))
	case "GET_UUIDS":
		return appendGetUUIDs(nil, uint32(num(t, d["count"])))
	case "GET_IDS_WITH":
		after, hasAfter := d["after"]
		var a uint64
		if hasAfter {
			a = num(t, after)
		}
		key, _ := d["key"].(string)
		masked, _ := d["masked"].(bool)
		return appendGetIDsWith(nil, uint32(num(t, d["count"])), hasAfter, a, key, masked)
	case "GET_VALUES":
		name, ok := d["name"].(string)
		if !ok {
			t.Fatalf("GET_VALUES without a name: %v", d)
		}
		return appendGetValues(nil, uint32(num(t, d["count"])), name)
	}
	t.Fatalf("unknown request op %v", d["op"])
	return nil
}

// asDecoded is a decoded frame in the vectors' JSON shape.
func asDecoded(r response) map[string]any {
	ids := func() []any {
		out := make([]any, len(r.ids))
		for i, id := range r.ids {
			out[i] = strconv.FormatUint(id, 10)
		}
		return out
	}
	switch r.op {
	case opHelloOK:
		h := r.hello
		return map[string]any{"op": "HELLO_OK", "version": float64(h.Version),
			"epoch_ms": strconv.FormatUint(h.EpochMs, 10), "timestamp_bits": float64(h.TimestampBits),
			"worker_bits": float64(h.WorkerBits), "sequence_bits": float64(h.SequenceBits),
			"region_bits": float64(h.RegionBits), "max_batch": float64(h.MaxBatch),
			"max_request_frame": float64(h.MaxRequestFrame), "worker_first": float64(h.WorkerFirst),
			"worker_count": float64(h.WorkerCount), "shard": float64(h.Shard)}
	case opIDs:
		return map[string]any{"op": "IDS", "ids": ids()}
	case opRanges:
		return map[string]any{"op": "RANGES", "ids": ids()}
	case opValues:
		values := make([]any, len(r.values))
		for i, v := range r.values {
			values[i] = strconv.FormatUint(v, 10)
		}
		return map[string]any{"op": "VALUES", "mode": r.mode.String(), "values": values}
	case opUUIDs:
		uuids := make([]any, len(r.uuids))
		for i, u := range r.uuids {
			uuids[i] = hex.EncodeToString(u[:])
		}
		return map[string]any{"op": "UUIDS", "uuids": uuids}
	case opMaskedIDs:
		return map[string]any{"op": "MASKED_IDS", "key_id": float64(r.keyID), "ids": ids()}
	case opPong:
		return map[string]any{"op": "PONG", "token": strconv.FormatUint(r.token, 10)}
	case opError:
		var name any
		if r.status.Known() {
			name = r.status.Name()
		}
		return map[string]any{"op": "ERROR", "status": float64(r.status), "name": name,
			"message": r.message, "closes": r.status.Closes(), "retry_elsewhere": r.status.RetryElsewhere()}
	}
	return nil
}

func TestRequestVectorsEncodeByteExact(t *testing.T) {
	n := 0
	for _, v := range loadVectors(t) {
		if v.Direction != "request" || v.Decoded == nil {
			continue
		}
		n++
		t.Run(v.Name, func(t *testing.T) {
			raw := v.bytes(t)
			if v.Consumed != nil {
				raw = raw[:*v.Consumed]
			}
			if got := hex.EncodeToString(encodeRequest(t, v.Decoded)); got != hex.EncodeToString(raw) {
				t.Fatalf("encoded %s, want %s", got, hex.EncodeToString(raw))
			}
		})
	}
	if n < 10 {
		t.Fatalf("only %d request vectors with decoded", n)
	}
}

func TestResponseVectors(t *testing.T) {
	counts := map[string]int{}
	for _, v := range loadVectors(t) {
		if v.Direction != "response" {
			continue
		}
		raw := v.bytes(t)
		// Every vector holds for every version the client speaks, but VALUES (0x85), which
		// exists from version 3 only, and UUIDS (0x86), from version 4 only: before, each is
		// an unknown response opcode.
		isValues := len(raw) > 4 && raw[4] == opValues
		isUUIDs := len(raw) > 4 && raw[4] == opUUIDs
		isMasked := len(raw) > 4 && raw[4] == opMaskedIDs
		for _, version := range []uint16{1, 2, 3, 4, 5} {
			t.Run(v.Name+"/v"+strconv.Itoa(int(version)), func(t *testing.T) {
				r, used, err := decodeResponse(raw, v.MaxFrame, version)
				switch {
				case isValues && version < 3:
					counts["values before v3"]++
					if pe, ok := err.(*ProtocolError); !ok || pe.Status != StatusBadFrame {
						t.Fatalf("VALUES on a version %d connection: used %d, err %v, want BAD_FRAME", version, used, err)
					}
				case isUUIDs && version < 4:
					counts["uuids before v4"]++
					if pe, ok := err.(*ProtocolError); !ok || pe.Status != StatusBadFrame {
						t.Fatalf("UUIDS on a version %d connection: used %d, err %v, want BAD_FRAME", version, used, err)
					}
				case isMasked && version < IDsWithVersion:
					counts["masked before v5"]++
					if pe, ok := err.(*ProtocolError); !ok || pe.Status != StatusBadFrame {
						t.Fatalf("MASKED_IDS on a version %d connection: used %d, err %v, want BAD_FRAME", version, used, err)
					}
				case v.Decoded != nil:
					counts["decoded"]++
					if err != nil || used == 0 {
						t.Fatalf("decode: used %d, err %v", used, err)
					}
					want := len(raw)
					if v.Consumed != nil {
						want = *v.Consumed
					}
					if used != want {
						t.Fatalf("used %d bytes, want %d", used, want)
					}
					gotJSON, _ := json.Marshal(asDecoded(r))
					wantJSON, _ := json.Marshal(v.Decoded)
					if string(gotJSON) != string(wantJSON) {
						t.Fatalf("decoded\n %s\nwant\n %s", gotJSON, wantJSON)
					}
					// Split at every byte: the decoder asks for more until the frame is whole.
					for cut := 0; cut < used; cut++ {
						if _, u, err := decodeResponse(raw[:cut], v.MaxFrame, version); err != nil || u != 0 {
							t.Fatalf("cut at %d: used %d, err %v", cut, u, err)
						}
					}
				case v.Error != nil:
					counts["error"]++
					pe, ok := err.(*ProtocolError)
					if !ok {
						t.Fatalf("want a ProtocolError %d, got used %d, err %v", v.Error.Status, used, err)
					}
					if int(pe.Status) != v.Error.Status || pe.Status.Name() != v.Error.Name || !v.Error.Closes {
						t.Fatalf("status %s, want %d %s", pe.Status, v.Error.Status, v.Error.Name)
					}
				case v.Incomplete:
					counts["incomplete"]++
					if err != nil || used != 0 {
						t.Fatalf("want a request for more bytes, got used %d, err %v", used, err)
					}
				default:
					t.Fatal("vector has neither decoded, error nor incomplete")
				}
			})
		}
	}
	if counts["decoded"] < 30 || counts["error"] < 20 || counts["incomplete"] < 4 || counts["values before v3"] < 20 || counts["uuids before v4"] < 20 {
		t.Fatalf("too few response vectors: %v", counts)
	}
}

func TestOversizedLengthIsRejectedFromThePrefixAlone(t *testing.T) {
	_, _, err := decodeResponse([]byte{0xff, 0xff, 0xff, 0xff}, defaultMaxResponseFrame, 1)
	if pe, ok := err.(*ProtocolError); !ok || pe.Status != StatusFrameTooLarge {
		t.Fatalf("got %v", err)
	}
}

// RANGES (version 2): the example of PROTOCOL.md section 4.5, and every rule a client must
// check.
func TestRangesFrames(t *testing.T) {
	hexOf := func(s string) []byte {
		b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	example := hexOf("00000015 84 00002000 00000001 0000000000000000 00002000")
	r, used, err := decodeResponse(example, defaultMaxResponseFrame, 2)
	if err != nil || used != len(example) || r.op != opRanges || len(r.ids) != 8192 {
		t.Fatalf("example: %v used %d ids %d", err, used, len(r.ids))
	}
	for i, id := range r.ids {
		if id != uint64(i) {
			t.Fatalf("id[%d] = %d", i, id)
		}
	}
	two := hexOf("00000021 84 00000005 00000002 0000000000000010 00000002 0000000000000100 00000003")
	r, _, err = decodeResponse(two, defaultMaxResponseFrame, 2)
	if err != nil || len(r.ids) != 5 || r.ids[0] != 16 || r.ids[1] != 17 || r.ids[2] != 256 || r.ids[4] != 258 {
		t.Fatalf("two runs: %v %v", err, r.ids)
	}
	bad := []struct{ name, hex string }{
		{"v1 connection", "00000015 84 00000001 00000001 0000000000000000 00000001"},
		{"runs disagree with length", "00000015 84 00000001 00000002 0000000000000000 00000001"},
		{"run of count 0", "00000015 84 00000000 00000001 0000000000000000 00000000"},
		{"overlapping runs", "00000021 84 00000004 00000002 0000000000000010 00000002 0000000000000011 00000002"},
		{"decreasing runs", "00000021 84 00000004 00000002 0000000000000010 00000002 0000000000000001 00000002"},
		{"top bit", "00000015 84 00000002 00000001 7fffffffffffffff 00000002"},
		{"sum disagrees with total", "00000015 84 00000003 00000001 0000000000000000 00000002"},
		{"no runs", "00000009 84 00000000 00000000"},
	}
	for _, b := range bad {
		version := uint16(2)
		if b.name == "v1 connection" {
			version = 1
		}
		_, _, err := decodeResponse(hexOf(b.hex), defaultMaxResponseFrame, version)
		if pe, ok := err.(*ProtocolError); !ok || pe.Status != StatusBadFrame {
			t.Errorf("%s: got %v, want BAD_FRAME", b.name, err)
		}
	}
	if got := hex.EncodeToString(appendGetRanges(nil, 8192)); got != "000000050400002000" {
		t.Fatalf("GET_RANGES encoded %s", got)
	}
}

func TestStatusTableMatchesProtocolMd(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "protocol", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	table := strings.Split(strings.Split(string(data), "<!-- status-table:begin -->")[1], "<!-- status-table:end -->")[0]
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		code, _ := strconv.Atoi(cells[0])
		s := Status(code)
		if !s.Known() || s.Name() != cells[1] || s.Closes() != (cells[2] == "yes") || s.RetryElsewhere() != (cells[3] == "yes") {
			t.Errorf("row %q disagrees with %s closes=%v retry=%v", line, s, s.Closes(), s.RetryElsewhere())
		}
	}
	if rows != len(Statuses) {
		t.Fatalf("PROTOCOL.md lists %d statuses, the client %d", rows, len(Statuses))
	}
}

func TestUnknownStatusesFollowTheirClass(t *testing.T) {
	cases := []struct {
		code          Status
		closes, retry bool
	}{
		{299, false, false}, {399, false, true}, {499, true, false}, {199, true, false}, {600, true, false},
	}
	for _, c := range cases {
		if c.code.Known() || c.code.Closes() != c.closes || c.code.RetryElsewhere() != c.retry {
			t.Errorf("%d: closes %v retry %v", c.code, c.code.Closes(), c.code.RetryElsewhere())
		}
	}
	if StatusExhausted.RetryElsewhere() {
		t.Fatal("304 must not fail over")
	}
}

// The request vectors of GET_VALUES (version 3) on an established connection: the client
// never sends one that a server would refuse. The frames a vector decodes pass the client's
// checks (name, count, the connection's version, max_batch and max_request_frame, from the
// vector's version and limits) and encode byte-exact (above); for every frame a server
// refuses, the client's checks refuse the count and name the frame carries, before sending.
func TestGetValuesRequestVectorsPassOrFailTheClientsChecks(t *testing.T) {
	counts := map[string]int{}
	for _, v := range loadVectors(t) {
		raw := v.bytes(t)
		if v.Direction != "request" || v.Connection != "established" || len(raw) < 5 || raw[4] != opGetValues || v.Incomplete {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			h := seqHello()
			h.Version = 1
			if v.Version != nil {
				h.Version = *v.Version
			}
			h.MaxBatch, h.MaxRequestFrame = v.Limits.MaxBatch, v.Limits.MaxRequestFrame
			// The count and name the frame carries (what is there of them).
			length := int(binary.BigEndian.Uint32(raw))
			var count uint32
			if len(raw) >= 9 {
				count = binary.BigEndian.Uint32(raw[5:])
			}
			end := 4 + length
			if end > len(raw) {
				end = len(raw)
			}
			name := ""
			if end > 9 {
				name = string(raw[9:end])
			}
			err := checkSequenceName(name)
			if err == nil {
				err = checkValuesCount(int(count))
			}
			if err == nil {
				err = checkValuesRequest(h, "vector", name, int(count))
			}
			switch {
			case v.Decoded != nil:
				counts["sent"]++
				if err != nil {
					t.Fatalf("the client refuses %q x %d: %v", name, count, err)
				}
				if v.Decoded["name"] != name || num(t, v.Decoded["count"]) != uint64(count) {
					t.Fatalf("decoded %v, the frame holds %q x %d", v.Decoded, name, count)
				}
			case v.Error != nil:
				counts["refused"]++
				want := ErrInvalidArgument
				if v.Error.Status == int(StatusUnknownOpcode) {
					want = ErrSequencesUnsupported // GET_VALUES on a version 1 or 2 connection
				}
				if !errors.Is(err, want) {
					t.Fatalf("server answers %d %s; the client's checks of %q x %d gave %v, want %v",
						v.Error.Status, v.Error.Name, name, count, err, want)
				}
			default:
				t.Fatal("vector has neither decoded nor error")
			}
		})
	}
	if counts["sent"] < 4 || counts["refused"] < 12 {
		t.Fatalf("too few GET_VALUES request vectors: %v", counts)
	}
}

// VALUES (version 3): the example of PROTOCOL.md section 11.5, and GET_VALUES' encoding.
func TestValuesFrames(t *testing.T) {
	hexOf := func(s string) []byte {
		b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if got := hex.EncodeToString(appendGetValues(nil, 2, "orders")); got != "0000000b05000000026f7264657273" {
		t.Fatalf("GET_VALUES encoded %s", got)
	}
	example := hexOf("00000016 85 00 00000002 000000000000002A 000000000000002B")
	r, used, err := decodeResponse(example, defaultMaxResponseFrame, 3)
	if err != nil || used != len(example) || r.op != opValues || r.mode != SequenceDense ||
		len(r.values) != 2 || r.values[0] != 42 || r.values[1] != 43 {
		t.Fatalf("example: %v used %d %+v", err, used, r)
	}
	// The mode is checked as soon as it arrives, the count as soon as it arrives.
	for _, b := range []struct{ name, hex string }{
		{"mode 2 before the count", "00000016 85 02"},
		{"count before the values", "00000016 85 01 00000001"},
		{"length below one value", "0000000d 85 00 00000001"},
		{"length not 6 + 8k", "00000017 85 00 00000002"},
	} {
		_, _, err := decodeResponse(hexOf(b.hex), defaultMaxResponseFrame, 3)
		if pe, ok := err.(*ProtocolError); !ok || pe.Status != StatusBadFrame {
			t.Errorf("%s: got %v, want BAD_FRAME", b.name, err)
		}
	}
	// From version 3 the response limit takes a VALUES of max_batch values (one byte more
	// than an IDS of max_batch IDs).
	if l3, l2 := responseFrameLimit(1000, 3), responseFrameLimit(1000, 2); l3 != 6+8*1000 || l2 != 5+8*1000 {
		t.Fatalf("limits %d %d", l3, l2)
	}
	if responseFrameLimit(1<<31, 3) != 1<<32-1 || responseFrameLimit(0, 3) != errorMaxLength {
		t.Fatal("limit bounds")
	}
}
