package idgen

import (
	"errors"
	"math/rand"
	"strconv"
	"testing"
)

type formsFile struct {
	Forms []struct {
		ID, Decimal, Base62, Base32 string
	} `json:"forms"`
	Invalid []struct {
		Form, Text, Why string
	} `json:"invalid"`
	Base32Aliases []struct {
		Text, ID string
	} `json:"base32_aliases"`
}

func loadForms(t *testing.T) formsFile {
	var f formsFile
	loadJSON(t, "clients/vectors/forms.json", &f)
	if len(f.Forms) < 5 || len(f.Invalid) < 10 || len(f.Base32Aliases) < 1 {
		t.Fatalf("forms.json looks truncated: %d %d %d", len(f.Forms), len(f.Invalid), len(f.Base32Aliases))
	}
	return f
}

func mustUint(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestFormsKnownAnswers(t *testing.T) {
	for _, c := range loadForms(t).Forms {
		t.Run(c.ID, func(t *testing.T) {
			id := mustUint(t, c.ID)
			for _, f := range []struct {
				name   string
				format func(uint64) (string, error)
				parse  func(string) (uint64, error)
				want   string
			}{
				{"decimal", FormatDecimal, ParseDecimal, c.Decimal},
				{"base62", FormatBase62, ParseBase62, c.Base62},
				{"base32", FormatBase32, ParseBase32, c.Base32},
			} {
				got, err := f.format(id)
				if err != nil || got != f.want {
					t.Errorf("%s(%d) = %q, %v; want %q", f.name, id, got, err, f.want)
				}
				back, err := f.parse(f.want)
				if err != nil || back != id {
					t.Errorf("parse %s %q = %d, %v; want %d", f.name, f.want, back, err, id)
				}
			}
		})
	}
}

func TestFormsInvalidInputIsRejectedWithAReason(t *testing.T) {
	parsers := map[string]func(string) (uint64, error){
		"decimal": ParseDecimal, "base62": ParseBase62, "base32": ParseBase32,
	}
	for _, c := range loadForms(t).Invalid {
		t.Run(c.Form+"/"+c.Why, func(t *testing.T) {
			parse, ok := parsers[c.Form]
			if !ok {
				t.Fatalf("unknown form %q", c.Form)
			}
			v, err := parse(c.Text)
			var fe *FormError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalidID) {
				t.Fatalf("parse %q = %d, %v; want a FormError", c.Text, v, err)
			}
			if fe.Form != c.Form || fe.Reason == "" || fe.Kind == "" {
				t.Fatalf("error %+v", fe)
			}
		})
	}
}

func TestBase32Aliases(t *testing.T) {
	for _, c := range loadForms(t).Base32Aliases {
		v, err := ParseBase32(c.Text)
		if err != nil || v != mustUint(t, c.ID) {
			t.Errorf("ParseBase32(%q) = %d, %v; want %s", c.Text, v, err, c.ID)
		}
	}
}

func TestFormsRefuseIDsAtOrAbove2To63(t *testing.T) {
	for _, f := range []func(uint64) (string, error){FormatDecimal, FormatBase62, FormatBase32} {
		if _, err := f(MaxID + 1); !errors.Is(err, ErrInvalidID) {
			t.Errorf("got %v", err)
		}
	}
}

func TestSortableFormsSortLikeTheNumbers(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 2000; i++ {
		a, b := rng.Uint64()>>1, rng.Uint64()>>(1+rng.Intn(60))
		a62, _ := FormatBase62(a)
		b62, _ := FormatBase62(b)
		a32, _ := FormatBase32(a)
		b32, _ := FormatBase32(b)
		if (a < b) != (a62 < b62) || (a < b) != (a32 < b32) {
			t.Fatalf("%d vs %d: %s %s / %s %s", a, b, a62, b62, a32, b32)
		}
		for _, rt := range []struct {
			s string
			p func(string) (uint64, error)
		}{{a62, ParseBase62}, {a32, ParseBase32}} {
			if v, err := rt.p(rt.s); err != nil || v != a {
				t.Fatalf("round trip of %d via %q: %d %v", a, rt.s, v, err)
			}
		}
	}
}

func TestLayoutDecode(t *testing.T) {
	// PROTOCOL.md section 10's example.
	l := Layout{EpochMs: 1704067200000, TimestampBits: 41, WorkerBits: 10, SequenceBits: 12}
	p, err := l.Decode(264543142405996545)
	if err != nil || p.Sequence != 1 || p.Worker != 512 || p.Timestamp != 63072000123 || p.UnixMs != 1767139200123 || p.Region != 0 {
		t.Fatalf("%+v %v", p, err)
	}
	l.RegionBits = 3
	if p, _ := l.Decode(264543142405996545); p.Region != 4 {
		t.Fatalf("region %d", p.Region)
	}
}
