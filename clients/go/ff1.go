package idgen

import (
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"math/big"
)

// FF1 format-preserving encryption, NIST SP 800-38G (Algorithm 7 encrypt, Algorithm 8
// decrypt), with AES as the block cipher. Masking (mask.go) uses it with radix 2; it is
// general (radix 2 .. 2^16, any length NIST allows) so that NIST's published samples test it.

const (
	ff1MaxRadix  = 1 << 16
	ff1MaxLen    = 1 << 32 // NIST's maxlen
	ff1Rounds    = 10
	ff1MinDomain = 1000000 // radix^minlen >= 1,000,000 (SP 800-38G Rev. 1)
)

type ff1 struct {
	block cipher.Block
}

// newFF1 is FF1 under an AES key of 16, 24 or 32 bytes.
func newFF1(key []byte) (*ff1, error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, errors.New("an FF1 key is 16, 24 or 32 bytes")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return &ff1{block: block}, nil
}

// num is NUM_radix(X): the digits as a number, X[0] most significant.
func ff1Num(x []uint32, radix uint32) *big.Int {
	n, r, d := new(big.Int), new(big.Int).SetUint64(uint64(radix)), new(big.Int)
	for _, digit := range x {
		n.Mul(n, r)
		n.Add(n, d.SetUint64(uint64(digit)))
	}
	return n
}

// ff1Str is STR^m_radix(x): x as m digits, most significant first (x < radix^m).
func ff1Str(x *big.Int, radix uint32, m int) []uint32 {
	out := make([]uint32, m)
	v, r, d := new(big.Int).Set(x), new(big.Int).SetUint64(uint64(radix)), new(big.Int)
	for i := m - 1; i >= 0; i-- {
		v.QuoRem(v, r, d)
		out[i] = uint32(d.Uint64())
	}
	return out
}

func (f *ff1) check(x []uint32, radix uint32) error {
	if radix < 2 || radix > ff1MaxRadix {
		return errors.New("FF1: radix must be in 2 .. 65536")
	}
	n := len(x)
	if n < 2 || uint64(n) > ff1MaxLen {
		return errors.New("FF1: numeral string length out of range")
	}
	domain := new(big.Int).Exp(big.NewInt(int64(radix)), big.NewInt(int64(n)), nil)
	if domain.Cmp(big.NewInt(ff1MinDomain)) < 0 {
		return errors.New("FF1: radix^length is below 1,000,000")
	}
	for _, d := range x {
		if d >= radix {
			return errors.New("FF1: a numeral is not below the radix")
		}
	}
	return nil
}

// prf is CBC-MAC under AES with a zero IV: the last block of the encryption of data
// (a multiple of 16 bytes).
func (f *ff1) prf(data []byte) [16]byte {
	var y [16]byte
	for i := 0; i < len(data); i += 16 {
		for j := 0; j < 16; j++ {
			y[j] ^= data[i+j]
		}
		f.block.Encrypt(y[:], y[:])
	}
	return y
}

// run is Algorithm 7 (encrypt) or 8 (decrypt).
func (f *ff1) run(tweak []byte, x []uint32, radix uint32, decrypt bool) ([]uint32, error) {
	if err := f.check(x, radix); err != nil {
		return nil, err
	}
	n, t := len(x), len(tweak)
	u := n / 2
	v := n - u
	a, b := append([]uint32(nil), x[:u]...), append([]uint32(nil), x[u:]...)
	bigRadix := new(big.Int).SetUint64(uint64(radix))
	// b = ceil(ceil(v * log2(radix)) / 8): ceil(v * log2(radix)) is the bit length of radix^v - 1.
	rv := new(big.Int).Exp(bigRadix, big.NewInt(int64(v)), nil)
	ru := new(big.Int).Exp(bigRadix, big.NewInt(int64(u)), nil)
	bLen := (new(big.Int).Sub(rv, big.NewInt(1)).BitLen() + 7) / 8
	d := 4*((bLen+3)/4) + 4
	p := []byte{1, 2, 1, byte(radix >> 16), byte(radix >> 8), byte(radix), 10, byte(u),
		byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), byte(t >> 24), byte(t >> 16), byte(t >> 8), byte(t)}
	zeros := ((-t-bLen-1)%16 + 16) % 16
	q := make([]byte, t+zeros+1+bLen)
	copy(q, tweak)
	pq := make([]byte, 0, len(p)+len(q))
	blocks := (d + 15) / 16
	s := make([]byte, blocks*16)
	y, c := new(big.Int), new(big.Int)
	for step := 0; step < ff1Rounds; step++ {
		i, in := step, b
		if decrypt {
			i, in = ff1Rounds-1-step, a
		}
		q[t+zeros] = byte(i)
		numIn := ff1Num(in, radix).Bytes()
		for j := t + zeros + 1; j < len(q); j++ {
			q[j] = 0
		}
		copy(q[len(q)-len(numIn):], numIn)
		pq = append(append(pq[:0], p...), q...)
		r := f.prf(pq)
		copy(s, r[:])
		for j := 1; j < blocks; j++ {
			var blk [16]byte
			blk = r
			for k := 0; k < 8; k++ {
				blk[15-k] ^= byte(uint64(j) >> (8 * k))
			}
			f.block.Encrypt(s[16*j:16*j+16], blk[:])
		}
		y.SetBytes(s[:d])
		m, mod := u, ru
		if i%2 == 1 {
			m, mod = v, rv
		}
		if decrypt {
			c.Sub(ff1Num(b, radix), y)
		} else {
			c.Add(ff1Num(a, radix), y)
		}
		c.Mod(c, mod) // Euclidean: never negative
		out := ff1Str(c, radix, m)
		if decrypt {
			b, a = a, out
		} else {
			a, b = b, out
		}
	}
	return append(a, b...), nil
}

// encrypt is FF1.Encrypt(K, T, X).
func (f *ff1) encrypt(tweak []byte, x []uint32, radix uint32) ([]uint32, error) {
	return f.run(tweak, x, radix, false)
}

// decrypt is FF1.Decrypt(K, T, X).
func (f *ff1) decrypt(tweak []byte, x []uint32, radix uint32) ([]uint32, error) {
	return f.run(tweak, x, radix, true)
}
