package idgen

import (
	"encoding/hex"
	"fmt"
)

// UUID is an RFC 9562 UUID, its 16 bytes most significant first (the wire's order, and the
// order its text form writes them in). The UUIDs a node hands out (Client.NextUUIDs) are of
// version 7, made from IDs: they compare, as byte arrays (bytes.Compare) or as text, like the
// IDs they were made from. It is an array, so UUIDs compare with == and serve as map keys.
type UUID [16]byte

// String is the canonical text form, lowercase 8-4-4-4-12 hex digits:
// "019b71b4-4c7b-7800-8000-123456789abc".
func (u UUID) String() string {
	var b [36]byte
	u.appendText(b[:0])
	return string(b[:])
}

func (u UUID) appendText(b []byte) []byte {
	var t [36]byte
	hex.Encode(t[0:8], u[0:4])
	t[8] = '-'
	hex.Encode(t[9:13], u[4:6])
	t[13] = '-'
	hex.Encode(t[14:18], u[6:8])
	t[18] = '-'
	hex.Encode(t[19:23], u[8:10])
	t[23] = '-'
	hex.Encode(t[24:36], u[10:16])
	return append(b, t[:]...)
}

// MarshalText is the canonical text form (encoding/json writes a UUID as that string).
func (u UUID) MarshalText() ([]byte, error) {
	return u.appendText(make([]byte, 0, 36)), nil
}

// UnmarshalText reads the canonical text form (either case). Anything else is an error.
func (u *UUID) UnmarshalText(text []byte) error {
	p, err := ParseUUID(string(text))
	if err != nil {
		return err
	}
	*u = p
	return nil
}

// ParseUUID reads the canonical text form, 8-4-4-4-12 hex digits (either case); anything
// else (braces, a "urn:uuid:" prefix, no hyphens) is an error.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("idgen: %q is not a UUID: want 8-4-4-4-12 hex digits", s)
	}
	j := 0
	for _, span := range [][2]int{{0, 8}, {9, 13}, {14, 18}, {19, 23}, {24, 36}} {
		n, err := hex.Decode(u[j:], []byte(s[span[0]:span[1]]))
		if err != nil {
			return UUID{}, fmt.Errorf("idgen: %q is not a UUID: %v", s, err)
		}
		j += n
	}
	return u, nil
}

// Version is the UUID's version (the top 4 bits of byte 6): 7 for idgen's UUIDs.
func (u UUID) Version() int { return int(u[6] >> 4) }

// uuidVariantOK reports whether the variant bits are RFC 9562's 10.
func (u UUID) uuidVariantOK() bool { return u[8]>>6 == 0b10 }

// UUIDParts is a version 7 UUID of idgen taken apart (PROTOCOL.md section 10.1): the ID it
// was made from, and that ID's fields.
type UUIDParts struct {
	ID uint64
	IDParts
}

// DecodeUUID takes a version 7 UUID made by a node of this layout apart: the ID it was made
// from and its fields. It fails, saying which check, for another version, another variant,
// or a time before the epoch or past the layout's last millisecond.
func (l Layout) DecodeUUID(u UUID) (UUIDParts, error) {
	if v := u.Version(); v != 7 {
		return UUIDParts{}, fmt.Errorf("idgen: UUID %s is of version %d, not 7", u, v)
	}
	if !u.uuidVariantOK() {
		return UUIDParts{}, fmt.Errorf("idgen: UUID %s is not of RFC 9562's variant (bits 10)", u)
	}
	hi := beUint64(u[0:8])
	lo := beUint64(u[8:16])
	unixMs := hi >> 16
	if unixMs < l.EpochMs {
		return UUIDParts{}, fmt.Errorf("idgen: UUID %s: its time %d ms is before the epoch %d ms", u, unixMs, l.EpochMs)
	}
	if unixMs > l.LastUnixMs() {
		return UUIDParts{}, fmt.Errorf("idgen: UUID %s: its time %d ms is past the layout's last millisecond %d", u, unixMs, l.LastUnixMs())
	}
	// The 74 bits: rand_a (12) then rand_b (62); worker ‖ sequence are their top bits.
	randA := hi & 0xFFF
	randB := lo & (1<<62 - 1)
	lowBits := l.shift()
	var low uint64
	if lowBits >= 12 {
		low = randA<<(lowBits-12) | randB>>(62-(lowBits-12))
	} else {
		low = randA >> (12 - lowBits)
	}
	id := (unixMs-l.EpochMs)<<lowBits | low
	p, err := l.Decode(id)
	if err != nil {
		return UUIDParts{}, err
	}
	return UUIDParts{ID: id, IDParts: p}, nil
}
