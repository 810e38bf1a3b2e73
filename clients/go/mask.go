package idgen

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Masking of clients/vectors/MASK.md: FF1 (NIST SP 800-38G, AES) over an ID's bits, a
// keyed one-to-one map of 0 .. 2^width onto itself. A masked ID tells nothing of creation
// time or worker to anyone without the key, and two IDs never share a masked form.

const (
	// DefaultMaskWidth is the bit width of the default layout's IDs.
	DefaultMaskWidth = 63
	// MinMaskWidth and MaxMaskWidth bound the widths masking is defined for (FF1 with
	// radix 2 needs at least 20 digits).
	MinMaskWidth = 20
	MaxMaskWidth = 63
	// MaskKeysEnv is the environment variable MaskKeysFromEnv reads.
	MaskKeysEnv = "IDGEN_MASK_KEYS"
	// MaskedStringLen is the length of a masked string: a key-id character, then the masked
	// value in 11 base62 characters.
	MaskedStringLen = 1 + Base62Width
	// MaxMaskKeyID is the largest key id (one base62 character).
	MaxMaskKeyID = 61
)

// ErrMask matches every *MaskError.
var ErrMask = errors.New("idgen: masking error")

// MaskError is a keyring that cannot be read, or an ID, masked value, key id or width that
// masking refuses. Its message never holds key material.
type MaskError struct {
	Reason string
}

func (e *MaskError) Error() string { return "idgen: mask: " + e.Reason }

// Is matches ErrMask.
func (e *MaskError) Is(target error) bool { return target == ErrMask }

func maskErr(format string, args ...any) error {
	return &MaskError{Reason: fmt.Sprintf(format, args...)}
}

// MaskKeyring holds the keys masking uses, each under a key id 0..61. The first key of the
// keyring's text is the current one, which masks; every key unmasks. It never prints a key.
type MaskKeyring struct {
	current int
	ids     []int
	keys    [MaxMaskKeyID + 1]*ff1
}

// ParseMaskKeys reads a keyring: entries `<keyid>:<hex key>` (key id in decimal, 0..61; a
// key of 32, 48 or 64 hex digits: AES-128, -192 or -256) separated by commas and/or
// newlines. Blank lines, lines starting with '#' and whitespace around entries are ignored.
func ParseMaskKeys(text string) (*MaskKeyring, error) {
	k := &MaskKeyring{current: -1}
	entry := 0
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, item := range strings.Split(line, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			entry++
			if err := k.add(entry, item); err != nil {
				return nil, err
			}
		}
	}
	if len(k.ids) == 0 {
		return nil, maskErr("the keyring holds no keys")
	}
	return k, nil
}

func (k *MaskKeyring) add(entry int, item string) error {
	idText, keyText, ok := strings.Cut(item, ":")
	if !ok {
		return maskErr("keyring entry %d: expected <keyid>:<hex key>", entry)
	}
	idText, keyText = strings.TrimSpace(idText), strings.TrimSpace(keyText)
	if idText == "" || strings.Trim(idText, "0123456789") != "" {
		return maskErr("keyring entry %d: the key id is not a decimal number", entry)
	}
	id, err := strconv.Atoi(idText)
	if err != nil || id > MaxMaskKeyID {
		return maskErr("keyring entry %d: key id out of range (0..%d)", entry, MaxMaskKeyID)
	}
	if k.keys[id] != nil {
		return maskErr("keyring entry %d: duplicate key id %d", entry, id)
	}
	for i := 0; i < len(keyText); i++ {
		if !isHexDigit(keyText[i]) {
			return maskErr("keyring entry %d (key id %d): the key is not hex", entry, id)
		}
	}
	if n := len(keyText); n != 32 && n != 48 && n != 64 {
		return maskErr("keyring entry %d (key id %d): a key is 32, 48 or 64 hex digits, not %d", entry, id, n)
	}
	key, err := hex.DecodeString(keyText)
	if err != nil {
		return maskErr("keyring entry %d (key id %d): the key is not hex", entry, id)
	}
	f, err := newFF1(key)
	if err != nil {
		return maskErr("keyring entry %d (key id %d): %v", entry, id, err)
	}
	k.keys[id] = f
	k.ids = append(k.ids, id)
	if k.current < 0 {
		k.current = id
	}
	return nil
}

func isHexDigit(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// MaskKeysFromEnv reads the keyring from the environment variable IDGEN_MASK_KEYS.
func MaskKeysFromEnv() (*MaskKeyring, error) {
	text, ok := os.LookupEnv(MaskKeysEnv)
	if !ok || strings.TrimSpace(text) == "" {
		return nil, maskErr("%s is not set", MaskKeysEnv)
	}
	return ParseMaskKeys(text)
}

// MaskKeysFromFile reads the keyring from a file.
func MaskKeysFromFile(path string) (*MaskKeyring, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("idgen: mask keys file: %w", err)
	}
	return ParseMaskKeys(string(data))
}

// CurrentKeyID is the id of the key that masks (the keyring's first).
func (k *MaskKeyring) CurrentKeyID() int { return k.current }

// KeyIDs are the keyring's key ids, the current one first.
func (k *MaskKeyring) KeyIDs() []int { return append([]int(nil), k.ids...) }

// String names the key ids, never the keys.
func (k MaskKeyring) String() string {
	return fmt.Sprintf("MaskKeyring(current key id %d, key ids %v, keys hidden)", k.current, k.ids)
}

// GoString names the key ids, never the keys.
func (k MaskKeyring) GoString() string { return k.String() }

func checkMaskWidth(width int) error {
	if width < MinMaskWidth || width > MaxMaskWidth {
		return maskErr("mask width %d is outside %d..%d", width, MinMaskWidth, MaxMaskWidth)
	}
	return nil
}

func (k *MaskKeyring) key(keyID int) (*ff1, error) {
	if keyID < 0 || keyID > MaxMaskKeyID || k.keys[keyID] == nil {
		if keyID >= 0 && keyID <= MaxMaskKeyID {
			return nil, maskErr("unknown key id %c (%d)", base62Alphabet[keyID], keyID)
		}
		return nil, maskErr("unknown key id %d", keyID)
	}
	return k.keys[keyID], nil
}

// maskBits is FF1 over the width-bit numeral string of x (most significant bit first,
// radix 2) with the one-byte tweak [keyID].
func maskBits(f *ff1, keyID int, x uint64, width int, decrypt bool) (uint64, error) {
	bits := make([]uint32, width)
	for i := range bits {
		bits[i] = uint32(x>>(width-1-i)) & 1
	}
	tweak := []byte{byte(keyID)}
	var out []uint32
	var err error
	if decrypt {
		out, err = f.decrypt(tweak, bits, 2)
	} else {
		out, err = f.encrypt(tweak, bits, 2)
	}
	if err != nil {
		return 0, maskErr("%v", err)
	}
	var y uint64
	for _, b := range out {
		y = y<<1 | uint64(b)
	}
	return y, nil
}

// Mask is the masked form of an ID below 2^width under the current key (width 20..63; the
// default layout's is DefaultMaskWidth). The result is below 2^width too.
func (k *MaskKeyring) Mask(id uint64, width int) (uint64, error) {
	if err := checkMaskWidth(width); err != nil {
		return 0, err
	}
	if id>>width != 0 {
		return 0, maskErr("ID %d is not below 2^%d", id, width)
	}
	return maskBits(k.keys[k.current], k.current, id, width, false)
}

// Unmask is the ID a masked integer stands for, under the current key. A masked integer does
// not name its key: one masked under an older key needs UnmaskWithKey.
func (k *MaskKeyring) Unmask(masked uint64, width int) (uint64, error) {
	return k.UnmaskWithKey(masked, k.current, width)
}

// UnmaskWithKey is the ID a masked integer stands for, under the key keyID.
func (k *MaskKeyring) UnmaskWithKey(masked uint64, keyID int, width int) (uint64, error) {
	if err := checkMaskWidth(width); err != nil {
		return 0, err
	}
	f, err := k.key(keyID)
	if err != nil {
		return 0, err
	}
	if masked>>width != 0 {
		return 0, maskErr("masked value %d is not below 2^%d", masked, width)
	}
	return maskBits(f, keyID, masked, width, true)
}

// MaskString is the masked string form of an ID under the current key: the key id's base62
// character, then the masked value as 11 base62 characters (12 in all).
func (k *MaskKeyring) MaskString(id uint64, width int) (string, error) {
	m, err := k.Mask(id, width)
	if err != nil {
		return "", err
	}
	var out [MaskedStringLen]byte
	out[0] = base62Alphabet[k.current]
	for i := MaskedStringLen - 1; i >= 1; i-- {
		out[i] = base62Alphabet[m%62]
		m /= 62
	}
	return string(out[:]), nil
}

// UnmaskString is the ID a masked string stands for, under the key its first character
// names (which must be in the keyring).
func (k *MaskKeyring) UnmaskString(text string, width int) (uint64, error) {
	if err := checkMaskWidth(width); err != nil {
		return 0, err
	}
	if len(text) != MaskedStringLen {
		return 0, maskErr("a masked string is %d characters, not %d", MaskedStringLen, len(text))
	}
	for i := 0; i < len(text); i++ {
		if base62Value[text[i]] == invalidDigit {
			return 0, maskErr("invalid character %q at position %d of a masked string", rune(text[i]), i)
		}
	}
	keyID := int(base62Value[text[0]])
	if keyID > MaxMaskKeyID || k.keys[keyID] == nil {
		return 0, maskErr("unknown key id %c", text[0])
	}
	var v uint64
	for i := 1; i < len(text); i++ {
		d := uint64(base62Value[text[i]])
		if v > (^uint64(0)-d)/62 {
			return 0, maskErr("masked value is not below 2^%d", width)
		}
		v = v*62 + d
	}
	if v>>width != 0 {
		return 0, maskErr("masked value is not below 2^%d", width)
	}
	return maskBits(k.keys[keyID], keyID, v, width, true)
}
