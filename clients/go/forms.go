package idgen

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// String forms of clients/vectors/FORMS.md (masking: mask.go, clients/vectors/MASK.md). Every form covers IDs in
// 0 .. 2^63; parsing reports what is wrong with a *FormError.

// MaxID is the largest ID (the top bit of an idgen ID is always 0).
const MaxID = uint64(1)<<63 - 1

const (
	base62Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	base32Alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	// Base62Width and Base32Width are the fixed lengths of those forms.
	Base62Width           = 11
	Base32Width           = 13
	decimalMaxDigits      = 19
	invalidDigit     byte = 0xFF
)

var base62Value, base32Value [256]byte

func init() {
	for i := range base62Value {
		base62Value[i], base32Value[i] = invalidDigit, invalidDigit
	}
	for i := 0; i < len(base62Alphabet); i++ {
		base62Value[base62Alphabet[i]] = byte(i)
	}
	for i := 0; i < len(base32Alphabet); i++ {
		c := base32Alphabet[i]
		base32Value[c] = byte(i)
		base32Value[strings.ToLower(string(c))[0]] = byte(i)
	}
	for _, alias := range []struct {
		c byte
		v byte
	}{{'I', 1}, {'i', 1}, {'L', 1}, {'l', 1}, {'O', 0}, {'o', 0}} {
		base32Value[alias.c] = alias.v
	}
}

// ErrInvalidID matches every *FormError (every ID out of 0 .. 2^63 given to a form).
var ErrInvalidID = errors.New("idgen: invalid ID")

// FormErrorKind says what is wrong with a string form.
type FormErrorKind string

// The kinds of FormError.
const (
	FormEmpty            FormErrorKind = "empty"
	FormWrongLength      FormErrorKind = "wrong_length"
	FormInvalidCharacter FormErrorKind = "invalid_character"
	FormLeadingZero      FormErrorKind = "leading_zero"
	FormOutOfRange       FormErrorKind = "out_of_range"
)

// FormError: a string that is not a valid ID in its form ("decimal", "base62", "base32"),
// or an integer ("integer") outside 0 .. 2^63.
type FormError struct {
	Form   string
	Text   string
	Kind   FormErrorKind
	Reason string
}

func (e *FormError) Error() string {
	return fmt.Sprintf("idgen: invalid %s ID %q: %s", e.Form, e.Text, e.Reason)
}

// Is matches ErrInvalidID.
func (e *FormError) Is(target error) bool { return target == ErrInvalidID }

func checkID(id uint64, what string) error {
	if id&topBit != 0 {
		return &FormError{Form: "integer", Text: strconv.FormatUint(id, 10), Kind: FormOutOfRange,
			Reason: what + " must be in 0 .. 2^63"}
	}
	return nil
}

func formErr(form, text string, kind FormErrorKind, format string, args ...any) error {
	return &FormError{Form: form, Text: text, Kind: kind, Reason: fmt.Sprintf(format, args...)}
}

// FormatDecimal is the ID in base 10 (no sign, no leading zeros). It fails for an ID at or
// above 2^63.
func FormatDecimal(id uint64) (string, error) {
	if err := checkID(id, "ID"); err != nil {
		return "", err
	}
	return strconv.FormatUint(id, 10), nil
}

// ParseDecimal parses ASCII digits (at most 19, no leading zero but for "0") into an ID.
func ParseDecimal(text string) (uint64, error) {
	if text == "" {
		return 0, formErr("decimal", text, FormEmpty, "empty string")
	}
	for i := 0; i < len(text); i++ {
		if c := text[i]; c < '0' || c > '9' {
			return 0, formErr("decimal", text, FormInvalidCharacter,
				"character %q at position %d is not an ASCII digit", rune(c), i)
		}
	}
	if len(text) > decimalMaxDigits {
		return 0, formErr("decimal", text, FormWrongLength,
			"%d digits, at most %d allowed", len(text), decimalMaxDigits)
	}
	if len(text) > 1 && text[0] == '0' {
		return 0, formErr("decimal", text, FormLeadingZero, "leading zero")
	}
	v, err := strconv.ParseUint(text, 10, 64) // 19 digits always fit in a u64
	if err != nil || v&topBit != 0 {
		return 0, formErr("decimal", text, FormOutOfRange, "value is at or above 2^63")
	}
	return v, nil
}

// FormatBase62 is the ID as 11 characters of 0-9A-Za-z, most significant first,
// left-padded with '0': byte-wise order equals numeric order.
func FormatBase62(id uint64) (string, error) {
	if err := checkID(id, "ID"); err != nil {
		return "", err
	}
	var out [Base62Width]byte
	for i := Base62Width - 1; i >= 0; i-- {
		out[i] = base62Alphabet[id%62]
		id /= 62
	}
	return string(out[:]), nil
}

// ParseBase62 parses exactly 11 case-sensitive base62 characters.
func ParseBase62(text string) (uint64, error) {
	if text == "" {
		return 0, formErr("base62", text, FormEmpty, "empty string")
	}
	if len(text) != Base62Width {
		return 0, formErr("base62", text, FormWrongLength,
			"%d characters, exactly %d required", len(text), Base62Width)
	}
	var v uint64
	overflow := false
	for i := 0; i < len(text); i++ {
		d := base62Value[text[i]]
		if d == invalidDigit {
			return 0, formErr("base62", text, FormInvalidCharacter,
				"character %q at position %d is not in 0-9A-Za-z", rune(text[i]), i)
		}
		if overflow || v > (MaxID-uint64(d))/62 {
			overflow = true // keep checking the characters
			continue
		}
		v = v*62 + uint64(d)
	}
	if overflow {
		return 0, formErr("base62", text, FormOutOfRange, "value is at or above 2^63")
	}
	return v, nil
}

// FormatBase32 is the ID as 13 upper-case Crockford base32 characters, most significant
// first, left-padded with '0': byte-wise order equals numeric order.
func FormatBase32(id uint64) (string, error) {
	if err := checkID(id, "ID"); err != nil {
		return "", err
	}
	var out [Base32Width]byte
	for i := Base32Width - 1; i >= 0; i-- {
		out[i] = base32Alphabet[id&31]
		id >>= 5
	}
	return string(out[:]), nil
}

// ParseBase32 parses exactly 13 Crockford base32 characters: case-insensitive, I and L read
// as 1, O as 0, no hyphens.
func ParseBase32(text string) (uint64, error) {
	if text == "" {
		return 0, formErr("base32", text, FormEmpty, "empty string")
	}
	if len(text) != Base32Width {
		return 0, formErr("base32", text, FormWrongLength,
			"%d characters, exactly %d required", len(text), Base32Width)
	}
	var v uint64
	for i := 0; i < len(text); i++ {
		d := base32Value[text[i]]
		if d == invalidDigit {
			return 0, formErr("base32", text, FormInvalidCharacter,
				"character %q at position %d is not in the Crockford base32 alphabet", rune(text[i]), i)
		}
		v = v<<5 | uint64(d) // 13 * 5 = 65 bits: the first character's top bit is lost below
	}
	if base32Value[text[0]] > 7 {
		return 0, formErr("base32", text, FormOutOfRange,
			"value is at or above 2^63 (first character above 7)")
	}
	return v, nil
}

// Layout is a cluster's ID layout (from HELLO_OK), for taking IDs apart
// (PROTOCOL.md section 10).
type Layout struct {
	EpochMs       uint64
	TimestampBits uint8
	WorkerBits    uint8 // includes RegionBits
	SequenceBits  uint8
	RegionBits    uint8
}

// JSSafeBits is the widest JavaScript-safe layout: every ID of a layout at most 53 bits wide
// is at most 2^53 - 1 (Number.MAX_SAFE_INTEGER), an exact JavaScript number.
const JSSafeBits = 53

// IDBits is the layout's width, TimestampBits + WorkerBits + SequenceBits (at most 63): every
// ID is below 2^IDBits.
func (l Layout) IDBits() uint {
	return uint(l.TimestampBits) + uint(l.WorkerBits) + uint(l.SequenceBits)
}

// MaxID is the layout's largest ID, 2^IDBits - 1.
func (l Layout) MaxID() uint64 {
	if b := l.IDBits(); b < 64 {
		return 1<<b - 1
	}
	return ^uint64(0)
}

// JSSafe reports whether every ID of the layout is an exact JavaScript number (IDBits <= 53).
func (l Layout) JSSafe() bool { return l.IDBits() <= JSSafeBits }

// IDParts is an ID taken apart.
type IDParts struct {
	UnixMs    uint64 // Unix time in ms of the ID's timestamp
	Timestamp uint64 // ms since the layout's epoch
	Worker    uint32 // the full worker field (region bits included)
	Region    uint32 // the top RegionBits of the worker field (0 without regions)
	Sequence  uint32
}

// Decode takes an ID apart. It fails for an ID at or above 2^63, or at or above 2^IDBits
// (not an ID of this layout).
func (l Layout) Decode(id uint64) (IDParts, error) {
	if err := checkID(id, "ID"); err != nil {
		return IDParts{}, err
	}
	if id > l.MaxID() {
		return IDParts{}, &FormError{Form: "integer", Text: strconv.FormatUint(id, 10), Kind: FormOutOfRange,
			Reason: fmt.Sprintf("not an ID of this layout: its IDs are %d bits wide, below 2^%d", l.IDBits(), l.IDBits())}
	}
	s, w, r := uint(l.SequenceBits), uint(l.WorkerBits), uint(l.RegionBits)
	p := IDParts{
		Sequence:  uint32(id & (1<<s - 1)),
		Worker:    uint32((id >> s) & (1<<w - 1)),
		Timestamp: id >> (w + s),
	}
	if r > 0 {
		p.Region = p.Worker >> (w - r)
	}
	p.UnixMs = l.EpochMs + p.Timestamp
	return p, nil
}
