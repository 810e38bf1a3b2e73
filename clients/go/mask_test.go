package idgen

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// clients/vectors/mask.json (MASK.md): NIST's FF1 samples, masks and errors.
type maskFile struct {
	NISTFF1 []struct {
		Sample                            int
		Key, Tweak, Plaintext, Ciphertext string
		Radix                             uint32
	} `json:"nist_ff1"`
	Mask []struct {
		Keys, ID, Masked string
		MaskedStr        string `json:"masked_str"`
		Width            int
	} `json:"mask"`
	Errors []struct {
		Keys             *string
		Op, Input, Error string
		Width            int
	} `json:"errors"`
}

func loadMaskVectors(t *testing.T) maskFile {
	var f maskFile
	loadJSON(t, "clients/vectors/mask.json", &f)
	if len(f.NISTFF1) != 9 || len(f.Mask) < 10 || len(f.Errors) < 10 {
		t.Fatalf("mask.json looks truncated: %d %d %d", len(f.NISTFF1), len(f.Mask), len(f.Errors))
	}
	for _, m := range f.Mask {
		if m.MaskedStr == "" || m.Masked == "" || m.Width == 0 {
			t.Fatalf("incomplete mask vector %+v", m)
		}
	}
	return f
}

const ff1Digits = "0123456789abcdefghijklmnopqrstuvwxyz"

func digitsOf(t *testing.T, s string, radix uint32) []uint32 {
	out := make([]uint32, len(s))
	for i := 0; i < len(s); i++ {
		d := strings.IndexByte(ff1Digits, s[i])
		if d < 0 || uint32(d) >= radix {
			t.Fatalf("%q: not a radix-%d numeral", s, radix)
		}
		out[i] = uint32(d)
	}
	return out
}

func digitString(d []uint32) string {
	b := make([]byte, len(d))
	for i, v := range d {
		b[i] = ff1Digits[v]
	}
	return string(b)
}

func TestFF1NISTSamples(t *testing.T) {
	for _, s := range loadMaskVectors(t).NISTFF1 {
		t.Run(strconv.Itoa(s.Sample), func(t *testing.T) {
			key, err := hex.DecodeString(s.Key)
			if err != nil {
				t.Fatal(err)
			}
			tweak, err := hex.DecodeString(s.Tweak)
			if err != nil {
				t.Fatal(err)
			}
			f, err := newFF1(key)
			if err != nil {
				t.Fatal(err)
			}
			ct, err := f.encrypt(tweak, digitsOf(t, s.Plaintext, s.Radix), s.Radix)
			if err != nil || digitString(ct) != s.Ciphertext {
				t.Fatalf("encrypt = %s, %v; want %s", digitString(ct), err, s.Ciphertext)
			}
			pt, err := f.decrypt(tweak, digitsOf(t, s.Ciphertext, s.Radix), s.Radix)
			if err != nil || digitString(pt) != s.Plaintext {
				t.Fatalf("decrypt = %s, %v; want %s", digitString(pt), err, s.Plaintext)
			}
		})
	}
}

// A 128-digit radix-36 string (capitalone/fpe's vector, also in the Rust fpe crate's tests):
// its PRF output S spans three AES blocks, which NIST's samples (one block) never reach.
func TestFF1LongNumeralString(t *testing.T) {
	const pt = "xs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyal"
	const ct = "lwulibfp1ju3ksztumqomwenpv7duy9q7pg7zf3eg3rjlfy46gmgkqjfwvromfjjktmbey8meqk9zkcmgvkv4s9ll5ctozme1hf15w7xo6zsylqcr0nbx9jbf10umzok"
	key, _ := hex.DecodeString("2b7e151628aed2a6abf7158809cf4f3cef4359d8d580aa4f7f036d6f04fc6a94")
	f, err := newFF1(key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.encrypt(nil, digitsOf(t, pt, 36), 36)
	if err != nil || digitString(got) != ct {
		t.Fatalf("encrypt = %s, %v", digitString(got), err)
	}
	back, err := f.decrypt(nil, digitsOf(t, ct, 36), 36)
	if err != nil || digitString(back) != pt {
		t.Fatalf("decrypt = %s, %v", digitString(back), err)
	}
}

func TestFF1RefusesWhatNISTDoesNotAllow(t *testing.T) {
	if _, err := newFF1(make([]byte, 20)); err == nil {
		t.Fatal("a 20-byte key accepted")
	}
	f, _ := newFF1(make([]byte, 16))
	for _, c := range []struct {
		x     []uint32
		radix uint32
	}{
		{make([]uint32, 19), 2},                       // 2^19 < 1,000,000
		{make([]uint32, 10), 1},                       // radix below 2
		{[]uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 10}, 10}, // a numeral not below the radix
	} {
		if _, err := f.encrypt(nil, c.x, c.radix); err == nil {
			t.Errorf("encrypt of %v in radix %d accepted", c.x, c.radix)
		}
	}
}

// Every mask vector: the masked string's first character names the key the vector masked
// with; when that is the keyring's current key, Mask and MaskString give the vector's
// values, and under any key UnmaskWithKey and UnmaskString give the ID back.
func TestMaskVectors(t *testing.T) {
	for i, m := range loadMaskVectors(t).Mask {
		t.Run(fmt.Sprintf("%d/%s/w%d", i, m.ID, m.Width), func(t *testing.T) {
			ring, err := ParseMaskKeys(m.Keys)
			if err != nil {
				t.Fatal(err)
			}
			id, masked := mustUint(t, m.ID), mustUint(t, m.Masked)
			keyID := strings.IndexByte(base62Alphabet, m.MaskedStr[0])
			if keyID == ring.CurrentKeyID() {
				if got, err := ring.Mask(id, m.Width); err != nil || got != masked {
					t.Errorf("Mask = %d, %v; want %d", got, err, masked)
				}
				if got, err := ring.MaskString(id, m.Width); err != nil || got != m.MaskedStr {
					t.Errorf("MaskString = %q, %v; want %q", got, err, m.MaskedStr)
				}
				if got, err := ring.Unmask(masked, m.Width); err != nil || got != id {
					t.Errorf("Unmask = %d, %v; want %d", got, err, id)
				}
			}
			if got, err := ring.UnmaskWithKey(masked, keyID, m.Width); err != nil || got != id {
				t.Errorf("UnmaskWithKey(%d) = %d, %v; want %d", keyID, got, err, id)
			}
			if got, err := ring.UnmaskString(m.MaskedStr, m.Width); err != nil || got != id {
				t.Errorf("UnmaskString = %d, %v; want %d", got, err, id)
			}
		})
	}
}

func TestMaskErrorVectors(t *testing.T) {
	for i, e := range loadMaskVectors(t).Errors {
		t.Run(fmt.Sprintf("%d/%s/%s", i, e.Op, e.Error), func(t *testing.T) {
			var err error
			if e.Op == "parse_keys" {
				_, err = ParseMaskKeys(e.Input)
			} else {
				if e.Keys == nil {
					t.Fatal("vector without keys")
				}
				ring, perr := ParseMaskKeys(*e.Keys)
				if perr != nil {
					t.Fatal(perr)
				}
				switch e.Op {
				case "unmask_str":
					_, err = ring.UnmaskString(e.Input, e.Width)
				case "mask":
					id, perr := strconv.ParseUint(e.Input, 10, 64)
					if perr != nil {
						t.Fatal(perr)
					}
					_, err = ring.Mask(id, e.Width)
				default:
					t.Fatalf("unknown op %q", e.Op)
				}
			}
			if !errors.Is(err, ErrMask) || !strings.Contains(err.Error(), e.Error) {
				t.Fatalf("got %v; want a MaskError containing %q", err, e.Error)
			}
			if e.Op == "parse_keys" {
				assertNoKeyMaterial(t, err.Error(), e.Input)
			} else {
				assertNoKeyMaterial(t, err.Error(), *e.Keys)
			}
		})
	}
}

// assertNoKeyMaterial fails when msg holds 8 or more consecutive hex digits of the keyring
// text's keys.
func assertNoKeyMaterial(t *testing.T, msg, keyring string) {
	t.Helper()
	for _, line := range strings.FieldsFunc(keyring, func(r rune) bool { return r == '\n' || r == ',' }) {
		_, key, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			key = strings.TrimSpace(line)
		}
		key = strings.TrimSpace(key)
		for i := 0; i+8 <= len(key); i++ {
			if strings.Contains(msg, key[i:i+8]) {
				t.Fatalf("error %q shows key material %q", msg, key[i:i+8])
			}
		}
	}
}

const testKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func mustKeys(t *testing.T, text string) *MaskKeyring {
	t.Helper()
	k, err := ParseMaskKeys(text)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestMaskKeyringParserRefusesHostileInput(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"", "no keys"},
		{"\n\n  \n# nothing\n", "no keys"},
		{"1:" + testKey[:62] + "zz", "not hex"},
		{"1:" + testKey[:63] + "é", "not hex"},
		{"1:" + testKey[:62], "32, 48 or 64 hex digits"},
		{"1:", "32, 48 or 64 hex digits"},
		{"1:" + testKey[:33], "32, 48 or 64 hex digits"},
		{"62:" + testKey, "key id out of range"},
		{"99999999999999999999999:" + testKey, "key id out of range"},
		{"-1:" + testKey, "key id"},
		{"+1:" + testKey, "key id"},
		{":" + testKey, "key id"},
		{"1:" + testKey + "\n2:" + testKey[:32] + ",1:" + testKey[:48], "duplicate key id 1"},
		{testKey, "<keyid>:<hex key>"},
		{"1:" + testKey + ",garbage", "entry 2: expected"},
	} {
		k, err := ParseMaskKeys(c.text)
		if k != nil || !errors.Is(err, ErrMask) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseMaskKeys(%q) = %v, %v; want an error containing %q", c.text, k, err, c.want)
			continue
		}
		assertNoKeyMaterial(t, err.Error(), c.text)
	}
}

func TestMaskKeyringTextForms(t *testing.T) {
	k := mustKeys(t, "\n  # rotated 2026-12\n  7 : "+strings.ToUpper(testKey)+" ,, 3:"+testKey[:32]+"\r\n\n61:"+testKey[:48]+"\n")
	if k.CurrentKeyID() != 7 || fmt.Sprint(k.KeyIDs()) != "[7 3 61]" {
		t.Fatalf("current %d, ids %v", k.CurrentKeyID(), k.KeyIDs())
	}
	if ids := mustKeys(t, "001:"+testKey+",000:"+testKey).KeyIDs(); fmt.Sprint(ids) != "[1 0]" {
		t.Fatalf("leading zeros: %v", ids)
	}
	// Upper- and lower-case hex are the same key.
	lower := mustKeys(t, "7:"+testKey)
	for _, id := range []uint64{0, 1, 264543142405996545} {
		a, _ := k.Mask(id, 63)
		b, _ := lower.Mask(id, 63)
		if a != b {
			t.Fatalf("%d: %d vs %d", id, a, b)
		}
	}
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, *k, k, *k)} {
		if !strings.Contains(s, "keys hidden") {
			t.Fatalf("printed as %q", s)
		}
		assertNoKeyMaterial(t, s, testKey)
		assertNoKeyMaterial(t, strings.ToLower(s), testKey)
	}
}

func TestMaskKeysFromEnvAndFile(t *testing.T) {
	t.Setenv(MaskKeysEnv, "4:"+testKey)
	k, err := MaskKeysFromEnv()
	if err != nil || k.CurrentKeyID() != 4 {
		t.Fatalf("%v %v", k, err)
	}
	t.Setenv(MaskKeysEnv, "")
	if _, err := MaskKeysFromEnv(); !errors.Is(err, ErrMask) || !strings.Contains(err.Error(), MaskKeysEnv) {
		t.Fatalf("empty variable: %v", err)
	}
	path := filepath.Join(t.TempDir(), "mask.keys")
	if err := os.WriteFile(path, []byte("# current first\n9:"+testKey+"\n4:"+testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err = MaskKeysFromFile(path)
	if err != nil || k.CurrentKeyID() != 9 || len(k.KeyIDs()) != 2 {
		t.Fatalf("%v %v", k, err)
	}
	if _, err := MaskKeysFromFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing file accepted")
	}
}

func TestMaskRefusesBadWidthsIDsAndKeyIDs(t *testing.T) {
	k := mustKeys(t, "1:"+testKey)
	for _, w := range []int{-1, 0, 19, 64, 1000} {
		if _, err := k.Mask(0, w); !errors.Is(err, ErrMask) || !strings.Contains(err.Error(), "mask width") {
			t.Errorf("Mask width %d: %v", w, err)
		}
		if _, err := k.Unmask(0, w); !errors.Is(err, ErrMask) {
			t.Errorf("Unmask width %d: %v", w, err)
		}
		if _, err := k.UnmaskString("100000000000", w); !errors.Is(err, ErrMask) {
			t.Errorf("UnmaskString width %d: %v", w, err)
		}
	}
	for _, w := range []int{20, 53, 63} {
		if _, err := k.Mask(1<<w, w); !errors.Is(err, ErrMask) || !strings.Contains(err.Error(), fmt.Sprintf("not below 2^%d", w)) {
			t.Errorf("Mask(2^%d): %v", w, err)
		}
		if _, err := k.Unmask(1<<w, w); !errors.Is(err, ErrMask) {
			t.Errorf("Unmask(2^%d): %v", w, err)
		}
	}
	if _, err := k.Mask(^uint64(0), 63); !errors.Is(err, ErrMask) {
		t.Errorf("Mask(2^64-1): %v", err)
	}
	for _, id := range []int{0, 2, 61, 62, -1} {
		if _, err := k.UnmaskWithKey(5, id, 63); !errors.Is(err, ErrMask) || !strings.Contains(err.Error(), "unknown key id") {
			t.Errorf("UnmaskWithKey key %d: %v", id, err)
		}
	}
	for _, s := range []string{
		"200000000000", // key id 2 not in the keyring
		"1zzzzzzzzzzz", // above 2^64
		"1AzL8n0Y58m8", // 2^63 exactly
		"1 0000000000", "1000000000_0", "10000000000\x00", "1é000000000", "1000000000\n",
		"", "1", "10000000000000000000000000",
	} {
		if v, err := k.UnmaskString(s, 63); !errors.Is(err, ErrMask) {
			t.Errorf("UnmaskString(%q) = %d, %v", s, v, err)
		}
	}
	if _, err := k.UnmaskString("1AzL8n0Y58m7", 63); err != nil { // 2^63 - 1
		t.Errorf("2^63-1: %v", err)
	}
}

func TestMaskIsOneToOneAndKeyed(t *testing.T) {
	a := mustKeys(t, "1:"+testKey)
	b := mustKeys(t, "2:"+testKey) // same key bytes, another key id: another permutation
	rng := rand.New(rand.NewSource(11))
	for _, w := range []int{20, 53, 63} {
		seen := map[uint64]uint64{}
		for i := 0; i < 2000; i++ {
			id := rng.Uint64() >> (64 - w)
			m, err := a.Mask(id, w)
			if err != nil || m>>w != 0 {
				t.Fatalf("Mask(%d, %d) = %d, %v", id, w, m, err)
			}
			if back, err := a.Unmask(m, w); err != nil || back != id {
				t.Fatalf("Unmask(Mask(%d)) = %d, %v", id, back, err)
			}
			s, _ := a.MaskString(id, w)
			if back, err := a.UnmaskString(s, w); err != nil || back != id || len(s) != MaskedStringLen || s[0] != '1' {
				t.Fatalf("UnmaskString(%q) = %d, %v", s, back, err)
			}
			if other, ok := seen[m]; ok && other != id {
				t.Fatalf("%d and %d both mask to %d", id, other, m)
			}
			seen[m] = id
			if mb, _ := b.Mask(id, w); mb == m {
				t.Fatalf("key ids 1 and 2 masked %d alike", id)
			}
		}
	}
	// Width 20's whole domain: a permutation of 0 .. 2^20 (sampled in strides).
	seen := map[uint64]bool{}
	for id := uint64(0); id < 1<<20; id += 97 {
		m, _ := a.Mask(id, 20)
		if seen[m] {
			t.Fatalf("collision at %d", m)
		}
		seen[m] = true
	}
}

func BenchmarkMask63(b *testing.B) {
	k, err := ParseMaskKeys("1:" + testKey)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if _, err := k.Mask(uint64(i), 63); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmaskString63(b *testing.B) {
	k, err := ParseMaskKeys("1:" + testKey)
	if err != nil {
		b.Fatal(err)
	}
	s, _ := k.MaskString(264543142405996545, 63)
	for i := 0; i < b.N; i++ {
		if _, err := k.UnmaskString(s, 63); err != nil {
			b.Fatal(err)
		}
	}
}

// Random bytes as keyrings and masked strings: an error of the package's kind or a result,
// never a panic.
func TestMaskRandomHostileInput(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	k := mustKeys(t, "1:"+testKey)
	const pieces = "0123456789abcdefABCDEFzZ:,\n# \r\x00\xff-+é"
	for i := 0; i < 20000; i++ {
		b := make([]byte, rng.Intn(80))
		for j := range b {
			if rng.Intn(4) == 0 {
				b[j] = byte(rng.Intn(256))
			} else {
				b[j] = pieces[rng.Intn(len(pieces))]
			}
		}
		if r, err := ParseMaskKeys(string(b)); err != nil && !errors.Is(err, ErrMask) || err == nil && r == nil {
			t.Fatalf("ParseMaskKeys(%q) = %v, %v", b, r, err)
		}
		s := string(b)
		if len(s) > MaskedStringLen && rng.Intn(2) == 0 {
			s = s[:MaskedStringLen]
		}
		if _, err := k.UnmaskString(s, MinMaskWidth+rng.Intn(MaxMaskWidth-MinMaskWidth+1)); err != nil && !errors.Is(err, ErrMask) {
			t.Fatalf("UnmaskString(%q): %v", s, err)
		}
	}
}
