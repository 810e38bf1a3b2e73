package idgen

import (
	"errors"
	"math/big"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

type boundsFile struct {
	Layouts []struct {
		Name   string `json:"name"`
		Layout struct {
			EpochMs       string `json:"epoch_ms"`
			TimestampBits uint8  `json:"timestamp_bits"`
			WorkerBits    uint8  `json:"worker_bits"`
			SequenceBits  uint8  `json:"sequence_bits"`
			RegionBits    uint8  `json:"region_bits"`
		} `json:"layout"`
		LastUnixMs string `json:"last_unix_ms"`
		At         []struct {
			UnixMs string `json:"unix_ms"`
			Min    string `json:"min"`
			Max    string `json:"max"`
			Error  string `json:"error"`
		} `json:"at"`
		Bounds []struct {
			FromMs string `json:"from_ms"`
			ToMs   string `json:"to_ms"`
			Lo     string `json:"lo"`
			Hi     string `json:"hi"`
			Last   string `json:"last"`
			Error  string `json:"error"`
		} `json:"bounds"`
	} `json:"layouts"`
}

var boundsErrors = map[string]error{
	"before_epoch": ErrBeforeEpoch,
	"after_last":   ErrAfterLastTimestamp,
	"empty":        ErrEmptyInterval,
}

func u64(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

func i64(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

func TestBoundsVectors(t *testing.T) {
	var f boundsFile
	loadJSON(t, "clients/vectors/bounds.json", &f)
	if len(f.Layouts) < 5 {
		t.Fatalf("%d layouts", len(f.Layouts))
	}
	answers, failures := 0, 0
	for _, lv := range f.Layouts {
		l := Layout{u64(t, lv.Layout.EpochMs), lv.Layout.TimestampBits, lv.Layout.WorkerBits, lv.Layout.SequenceBits, lv.Layout.RegionBits}
		if got := l.LastUnixMs(); got != u64(t, lv.LastUnixMs) {
			t.Errorf("%s: LastUnixMs %d, want %s", lv.Name, got, lv.LastUnixMs)
		}
		for _, c := range lv.At {
			at := i64(t, c.UnixMs)
			min, errMin := l.MinIDAt(at)
			max, errMax := l.MaxIDAt(at)
			if c.Error != "" {
				want := boundsErrors[c.Error]
				if !errors.Is(errMin, want) || !errors.Is(errMax, want) {
					t.Errorf("%s at %d: errors %v, %v; want %v", lv.Name, at, errMin, errMax, want)
				}
				failures++
				continue
			}
			if errMin != nil || errMax != nil || min != u64(t, c.Min) || max != u64(t, c.Max) {
				t.Errorf("%s at %d: %d %d (%v %v), want %s %s", lv.Name, at, min, max, errMin, errMax, c.Min, c.Max)
			}
			answers++
		}
		for _, c := range lv.Bounds {
			from, to := i64(t, c.FromMs), i64(t, c.ToMs)
			lo, hi, err := l.Bounds(from, to)
			if c.Error != "" {
				if !errors.Is(err, boundsErrors[c.Error]) {
					t.Errorf("%s [%d, %d): error %v, want %s", lv.Name, from, to, err, c.Error)
				}
				failures++
				continue
			}
			if err != nil || lo != u64(t, c.Lo) || hi != u64(t, c.Hi) || hi-1 != u64(t, c.Last) {
				t.Errorf("%s [%d, %d): %d %d (%v), want %s %s", lv.Name, from, to, lo, hi, err, c.Lo, c.Hi)
			}
			answers++
		}
	}
	if answers < 20 || failures < 20 {
		t.Fatalf("%d answers, %d errors", answers, failures)
	}
}

// firstIDAtOrAfter is the smallest ID whose time is at or after unixMs, found by bisection
// with Decode: an independent computation of the bounds, in big integers.
func firstIDAtOrAfter(t *testing.T, l Layout, unixMs uint64) uint64 {
	lo, hi := big.NewInt(0), new(big.Int).Lsh(big.NewInt(1), l.IDBits())
	for i := 0; i < 64 && lo.Cmp(hi) < 0; i++ {
		mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
		p, err := l.Decode(mid.Uint64())
		if err != nil {
			t.Fatal(err)
		}
		if p.UnixMs >= unixMs {
			hi = mid
		} else {
			lo = mid.Add(mid, big.NewInt(1))
		}
	}
	return lo.Uint64()
}

func TestBoundsAgreeWithASearchOverIDs(t *testing.T) {
	rng := rand.New(rand.NewSource(30))
	for i := 0; i < 300; i++ {
		tb := uint8(1 + rng.Intn(40)) // times stay within int64
		// Any width from 32 (or tb + 2) to 63 bits.
		width := 63 - uint8(rng.Intn(32))
		if width < tb+2 {
			width = tb + 2
		}
		wb := uint8(1 + rng.Intn(int(width-tb-1)))
		l := Layout{uint64(rng.Int63n(1 << 44)), tb, wb, width - tb - wb, uint8(rng.Intn(int(wb) + 1))}
		span := l.LastUnixMs() - l.EpochMs
		a, b := uint64(rng.Int63n(int64(span)+1)), uint64(rng.Int63n(int64(span)+1))
		if a == b {
			continue
		}
		if a > b {
			a, b = b, a
		}
		from, to := int64(l.EpochMs+a), int64(l.EpochMs+b)
		lo, hi, err := l.Bounds(from, to)
		if err != nil {
			t.Fatalf("%+v [%d, %d): %v", l, from, to, err)
		}
		if want := firstIDAtOrAfter(t, l, uint64(from)); lo != want {
			t.Errorf("%+v [%d, %d): lo %d, search %d", l, from, to, lo, want)
		}
		if want := firstIDAtOrAfter(t, l, uint64(to)); hi != want {
			t.Errorf("%+v [%d, %d): hi %d, search %d", l, from, to, hi, want)
		}
		if max, _ := l.MaxIDAt(to - 1); max != hi-1 {
			t.Errorf("%+v: MaxIDAt(to - 1) %d, hi - 1 %d", l, max, hi-1)
		}
		// An ID of any worker and sequence: inside iff its time is.
		for _, when := range []int64{from, to - 1, from - 1, to} {
			if when < int64(l.EpochMs) || uint64(when) > l.LastUnixMs() {
				continue
			}
			w, s := rng.Uint64()&(1<<wb-1), rng.Uint64()&(1<<l.SequenceBits-1)
			id := (uint64(when)-l.EpochMs)<<(wb+l.SequenceBits) | w<<l.SequenceBits | s
			if inside := lo <= id && id < hi; inside != (from <= when && when < to) {
				t.Errorf("%+v [%d, %d): ID %d of %d inside=%v", l, from, to, id, when, inside)
			}
		}
	}
}

// The JavaScript-safe layouts of the vectors: 53 bits wide, their last ID 2^53 - 1; a value
// at or above 2^53 is not one of their IDs.
func TestJavaScriptSafeLayouts(t *testing.T) {
	var f boundsFile
	loadJSON(t, "clients/vectors/bounds.json", &f)
	seen := 0
	for _, lv := range f.Layouts {
		l := Layout{u64(t, lv.Layout.EpochMs), lv.Layout.TimestampBits, lv.Layout.WorkerBits, lv.Layout.SequenceBits, lv.Layout.RegionBits}
		max, err := l.MaxIDAt(int64(l.LastUnixMs()))
		if err != nil || max != l.MaxID() {
			t.Errorf("%s: MaxIDAt(last) %d (%v), MaxID %d", lv.Name, max, err, l.MaxID())
		}
		if _, err := l.Decode(l.MaxID()); err != nil {
			t.Errorf("%s: Decode(MaxID): %v", lv.Name, err)
		}
		if l.IDBits() < 63 {
			if _, err := l.Decode(l.MaxID() + 1); !errors.Is(err, ErrInvalidID) {
				t.Errorf("%s: Decode(2^%d) = %v, want ErrInvalidID", lv.Name, l.IDBits(), err)
			}
		}
		if l.IDBits() != 53 {
			continue
		}
		seen++
		if !l.JSSafe() || max != 1<<53-1 {
			t.Errorf("%s: JSSafe %v, last ID %d", lv.Name, l.JSSafe(), max)
		}
	}
	if seen < 2 {
		t.Fatalf("%d JavaScript-safe layouts in the vectors", seen)
	}
	if (Layout{TimestampBits: 41, WorkerBits: 10, SequenceBits: 12}).JSSafe() {
		t.Fatal("the default layout is not JavaScript-safe")
	}
	_, err := Layout{TimestampBits: 41, WorkerBits: 2, SequenceBits: 10}.Decode(1 << 53)
	if err == nil || !strings.Contains(err.Error(), "53 bits wide") {
		t.Fatalf("Decode(2^53) in 53 bits: %v", err)
	}
}
