package idgen

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// The wire protocol of protocol/PROTOCOL.md: frame encoders and a response decoder. Pure
// functions, no I/O.

const (
	// MinProtocolVersion and MaxProtocolVersion bound the versions this client speaks.
	// Version 2 adds GET_RANGES/RANGES, version 3 GET_VALUES/VALUES (named sequences),
	// version 4 GET_UUIDS/UUIDS (version 7 UUIDs), version 5 GET_IDS_WITH/MASKED_IDS (IDs
	// after an ID seen, idempotency keys, masked IDs).
	MinProtocolVersion = 1
	MaxProtocolVersion = 5
	// UUIDsVersion is the first protocol version with GET_UUIDS.
	UUIDsVersion = 4
	// IDsWithVersion is the first protocol version with GET_IDS_WITH and MASKED_IDS.
	IDsWithVersion = 5

	opHello      = 0x01
	opGetIDs     = 0x02
	opPing       = 0x03
	opGetRanges  = 0x04
	opGetValues  = 0x05
	opGetUUIDs   = 0x06
	opGetIDsWith = 0x07
	opHelloOK    = 0x81
	opIDs        = 0x82
	opPong       = 0x83
	opRanges     = 0x84
	opValues     = 0x85
	opUUIDs      = 0x86
	opMaskedIDs  = 0x87
	opError      = 0xFF

	helloOKLength  = 33
	pongLength     = 9
	errorMinLength = 3
	errorMaxLength = 258 // 3 + 255 bytes of message

	// DefaultMaxBatch is the server's default max_batch.
	DefaultMaxBatch = 65536
	// defaultMaxResponseFrame is the response limit before HELLO_OK: 5 + 8 * 65536.
	defaultMaxResponseFrame = 5 + 8*DefaultMaxBatch
	topBit                  = uint64(1) << 63

	// MaxSequenceName is the longest sequence name, in bytes.
	MaxSequenceName = 64
	// MaxValuesPerCall is the most values one GET_VALUES may ask for (2^20), whatever the
	// node's max_batch.
	MaxValuesPerCall = 1 << 20

	// MaxIdempotencyKey is the longest idempotency key, in bytes (version 5).
	MaxIdempotencyKey = 64

	idsWithAfter  = 0x01
	idsWithKey    = 0x02
	idsWithMasked = 0x04
)

// SequenceMode is a named sequence's mode, as VALUES says it (docs/ARCHITECTURE.md §6).
type SequenceMode uint8

const (
	// SequenceDense: values come from blocks a node reserved ahead; unique, increasing per
	// connection, gaps when a node stops. A client may keep them (prefetch).
	SequenceDense SequenceMode = 0
	// SequenceStrict: each value is reserved by a store commit made after its request
	// arrived (real-time order across nodes). A client never keeps them.
	SequenceStrict SequenceMode = 1
)

// String is "dense" or "strict".
func (m SequenceMode) String() string {
	switch m {
	case SequenceDense:
		return "dense"
	case SequenceStrict:
		return "strict"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

var magic = [4]byte{'I', 'D', 'G', 'N'}

// ServerHello is a node's HELLO_OK: the negotiated version, the ID layout and the
// connection's limits and worker range.
type ServerHello struct {
	Version         uint16
	EpochMs         uint64
	TimestampBits   uint8
	WorkerBits      uint8 // includes RegionBits
	SequenceBits    uint8
	RegionBits      uint8
	MaxBatch        uint32
	MaxRequestFrame uint32
	WorkerFirst     uint32
	WorkerCount     uint32
	Shard           uint16
}

// Layout is the ID layout of the cluster (from HELLO_OK).
func (h ServerHello) Layout() Layout {
	return Layout{h.EpochMs, h.TimestampBits, h.WorkerBits, h.SequenceBits, h.RegionBits}
}

// appendHello appends HELLO offering minVersion..=maxVersion.
func appendHello(b []byte, minVersion, maxVersion uint16) []byte {
	b = append(b, 0, 0, 0, 9, opHello)
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint16(b, minVersion)
	return binary.BigEndian.AppendUint16(b, maxVersion)
}

// appendGetIDs appends GET_IDS of count.
func appendGetIDs(b []byte, count uint32) []byte {
	b = append(b, 0, 0, 0, 5, opGetIDs)
	return binary.BigEndian.AppendUint32(b, count)
}

// appendGetRanges appends GET_RANGES of count (version 2).
func appendGetRanges(b []byte, count uint32) []byte {
	b = append(b, 0, 0, 0, 5, opGetRanges)
	return binary.BigEndian.AppendUint32(b, count)
}

// appendGetValues appends GET_VALUES of count values of the sequence name (version 3). The
// caller has checked the name (checkSequenceName): 1..=64 bytes.
func appendGetValues(b []byte, count uint32, name string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(5+len(name)))
	b = append(b, opGetValues)
	b = binary.BigEndian.AppendUint32(b, count)
	return append(b, name...)
}

// appendGetUUIDs appends GET_UUIDS (version 4) of count.
func appendGetUUIDs(b []byte, count uint32) []byte {
	b = append(b, 0, 0, 0, 5, opGetUUIDs)
	return binary.BigEndian.AppendUint32(b, count)
}

// appendGetIDsWith appends GET_IDS_WITH (version 5) of count with its options: after when
// hasAfter, the idempotency key when key != "", masked. The caller has checked the key
// (checkIdempotencyKey).
func appendGetIDsWith(b []byte, count uint32, hasAfter bool, after uint64, key string, masked bool) []byte {
	length := 6
	var opts byte
	if hasAfter {
		opts |= idsWithAfter
		length += 8
	}
	if key != "" {
		opts |= idsWithKey
		length += 1 + len(key)
	}
	if masked {
		opts |= idsWithMasked
	}
	b = binary.BigEndian.AppendUint32(b, uint32(length))
	b = append(b, opGetIDsWith)
	b = binary.BigEndian.AppendUint32(b, count)
	b = append(b, opts)
	if hasAfter {
		b = binary.BigEndian.AppendUint64(b, after)
	}
	if key != "" {
		b = append(b, byte(len(key)))
		b = append(b, key...)
	}
	return b
}

// checkIdempotencyKey checks an idempotency key: 1..=64 visible ASCII bytes ('!' to '~').
func checkIdempotencyKey(key string) error {
	if len(key) == 0 || len(key) > MaxIdempotencyKey {
		return fmt.Errorf("idgen: an idempotency key is 1 to %d bytes, not %d", MaxIdempotencyKey, len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < '!' || c > '~' {
			return fmt.Errorf("idgen: an idempotency key is visible ASCII ('!' to '~'); byte %d is 0x%02x", i, c)
		}
	}
	return nil
}

// appendPing appends PING with token.
func appendPing(b []byte, token uint64) []byte {
	b = append(b, 0, 0, 0, 9, opPing)
	return binary.BigEndian.AppendUint64(b, token)
}

// responseFrameLimit is the client's response limit once max_batch and the version are
// known: max(5 + 8 * max_batch, 258) (PROTOCOL.md section 7), and from version 3 one byte
// more, since a VALUES of max_batch values (its mode byte) is 6 + 8 * max_batch long; from
// version 4 5 + 16 * max_batch, a UUIDS of max_batch UUIDs.
func responseFrameLimit(maxBatch uint32, version uint16) uint32 {
	l := uint64(5) + 8*uint64(maxBatch)
	if version >= UUIDsVersion {
		l = 5 + 16*uint64(maxBatch)
	} else if version >= 3 {
		l++
	}
	if l < errorMaxLength {
		l = errorMaxLength
	}
	if l > 1<<32-1 {
		l = 1<<32 - 1
	}
	return uint32(l)
}

func badFrame(format string, args ...any) *ProtocolError {
	return &ProtocolError{Status: StatusBadFrame, Detail: fmt.Sprintf(format, args...)}
}

// frameHeader checks the start of a response frame as early as its bytes allow: an
// oversized length from the 4 length bytes alone, a wrong length for the opcode from the
// opcode byte. It returns the frame's total size on the wire (4 + length) once the opcode
// is there, 0 while more bytes are needed. version is the negotiated version (0 before
// HELLO_OK): RANGES exists from version 2, VALUES from version 3. VALUES' mode and count are
// checked as soon as they have arrived, before the values.
func frameHeader(buf []byte, maxFrame uint32, version uint16) (int, error) {
	if len(buf) < 4 {
		return 0, nil
	}
	length := binary.BigEndian.Uint32(buf)
	if length == 0 {
		return 0, badFrame("frame length 0")
	}
	if length > maxFrame {
		return 0, &ProtocolError{Status: StatusFrameTooLarge,
			Detail: fmt.Sprintf("frame length %d exceeds limit %d", length, maxFrame)}
	}
	if len(buf) < 5 {
		return 0, nil
	}
	switch op := buf[4]; op {
	case opHelloOK:
		if length != helloOKLength {
			return 0, badFrame("HELLO_OK length %d, expected %d", length, helloOKLength)
		}
	case opPong:
		if length != pongLength {
			return 0, badFrame("PONG length %d, expected %d", length, pongLength)
		}
	case opIDs:
		if length < 5+8 || (length-5)%8 != 0 {
			return 0, badFrame("IDS length %d is not 5 + 8 * count with count >= 1", length)
		}
	case opRanges:
		if version < 2 {
			return 0, badFrame("RANGES (0x84) on a version %d connection", version)
		}
		if length < 9+12 || (length-9)%12 != 0 {
			return 0, badFrame("RANGES length %d is not 9 + 12 * runs with runs >= 1", length)
		}
	case opValues:
		if version < 3 {
			return 0, badFrame("VALUES (0x85) on a version %d connection", version)
		}
		if length < 6+8 || (length-6)%8 != 0 {
			return 0, badFrame("VALUES length %d is not 6 + 8 * count with count >= 1", length)
		}
		if len(buf) >= 6 && buf[5] > uint8(SequenceStrict) {
			return 0, badFrame("VALUES with unknown sequence mode %d", buf[5])
		}
		if len(buf) >= 10 {
			if count := binary.BigEndian.Uint32(buf[6:]); count != (length-6)/8 {
				return 0, badFrame("VALUES count %d disagrees with frame length %d", count, length)
			}
		}
	case opUUIDs:
		if version < UUIDsVersion {
			return 0, badFrame("UUIDS (0x86) on a version %d connection", version)
		}
		if length < 5+16 || (length-5)%16 != 0 {
			return 0, badFrame("UUIDS length %d is not 5 + 16 * count with count >= 1", length)
		}
		if len(buf) >= 9 {
			if count := binary.BigEndian.Uint32(buf[5:]); count != (length-5)/16 {
				return 0, badFrame("UUIDS count %d disagrees with frame length %d", count, length)
			}
		}
	case opMaskedIDs:
		if version < IDsWithVersion {
			return 0, badFrame("MASKED_IDS (0x87) on a version %d connection", version)
		}
		if length < 6+8 || (length-6)%8 != 0 {
			return 0, badFrame("MASKED_IDS length %d is not 6 + 8 * count with count >= 1", length)
		}
		if len(buf) >= 6 && buf[5] > MaxMaskKeyID {
			return 0, badFrame("MASKED_IDS with key ID %d above %d", buf[5], MaxMaskKeyID)
		}
		if len(buf) >= 10 {
			if count := binary.BigEndian.Uint32(buf[6:]); count != (length-6)/8 {
				return 0, badFrame("MASKED_IDS count %d disagrees with frame length %d", count, length)
			}
		}
	case opError:
		if length < errorMinLength || length > errorMaxLength {
			return 0, badFrame("ERROR length %d outside %d..=%d", length, errorMinLength, errorMaxLength)
		}
	default:
		return 0, badFrame("unknown response opcode 0x%02x", op)
	}
	return 4 + int(length), nil
}

// parseHello parses HELLO_OK's body (after the opcode) and checks the layout.
func parseHello(body []byte) (ServerHello, error) {
	be := binary.BigEndian
	h := ServerHello{
		Version:         be.Uint16(body[0:]),
		EpochMs:         be.Uint64(body[2:]),
		TimestampBits:   body[10],
		WorkerBits:      body[11],
		SequenceBits:    body[12],
		RegionBits:      body[13],
		MaxBatch:        be.Uint32(body[14:]),
		MaxRequestFrame: be.Uint32(body[18:]),
		WorkerFirst:     be.Uint32(body[22:]),
		WorkerCount:     be.Uint32(body[26:]),
		Shard:           be.Uint16(body[30:]),
	}
	if int(h.TimestampBits)+int(h.WorkerBits)+int(h.SequenceBits) > 63 {
		return h, badFrame("HELLO_OK layout bits %d+%d+%d > 63", h.TimestampBits, h.WorkerBits, h.SequenceBits)
	}
	if h.RegionBits > h.WorkerBits {
		return h, badFrame("HELLO_OK region_bits %d > worker_bits %d", h.RegionBits, h.WorkerBits)
	}
	return h, nil
}

// idsCount is the count of an IDS body, checked against the frame length.
func idsCount(body []byte) (int, error) {
	count := binary.BigEndian.Uint32(body)
	if count == 0 {
		return 0, badFrame("IDS with count 0")
	}
	if uint64(4)+8*uint64(count) != uint64(len(body)) {
		return 0, badFrame("IDS count %d disagrees with frame length %d", count, len(body)+1)
	}
	return int(count), nil
}

// parseIDs decodes an IDS body into dst (len(dst) must be the body's count). IDs must have
// the top bit clear and be strictly increasing, above after (the connection's last ID so
// far; -1 as topBit when none). It returns the last ID.
func parseIDs(body []byte, dst []uint64, last uint64, any bool) (uint64, error) {
	p := body[4:]
	for i := range dst {
		id := binary.BigEndian.Uint64(p[8*i:])
		if id&topBit != 0 {
			return last, badFrame("IDS holds an ID with the top bit set")
		}
		if any && id <= last {
			return last, badFrame("IDS: ID %d does not increase on %d", id, last)
		}
		dst[i] = id
		last, any = id, true
	}
	return last, nil
}

// uuidsCount is the count of a UUIDS body (checked against the frame length by frameHeader).
func uuidsCount(body []byte) int { return int(binary.BigEndian.Uint32(body)) }

// parseUUIDs decodes a UUIDS body into dst (len(dst) must be the body's count). Each UUID must
// be of version 7 and RFC 9562's variant, and they must be strictly increasing, above last
// when any (the connection's last UUID so far). It returns the last UUID.
func parseUUIDs(body []byte, dst []UUID, last UUID, any bool) (UUID, error) {
	p := body[4:]
	for i := range dst {
		var u UUID
		copy(u[:], p[16*i:])
		if v := u.Version(); v != 7 {
			return last, badFrame("UUIDS holds a UUID of version %d, not 7", v)
		}
		if !u.uuidVariantOK() {
			return last, badFrame("UUIDS holds a UUID whose variant bits are %02b, not 10", u[8]>>6)
		}
		if any && bytes.Compare(u[:], last[:]) <= 0 {
			return last, badFrame("UUIDS: UUID %s does not increase on %s", u, last)
		}
		dst[i] = u
		last, any = u, true
	}
	return last, nil
}

// rangesHeader checks a RANGES body: runs agree with the length, every run non-empty,
// strictly increasing and disjoint, below 2^63, counts summing to total. It returns total.
func rangesHeader(body []byte) (int, error) {
	be := binary.BigEndian
	total := be.Uint32(body)
	runs := be.Uint32(body[4:])
	if runs == 0 {
		return 0, badFrame("RANGES with 0 runs")
	}
	if uint64(8)+12*uint64(runs) != uint64(len(body)) {
		return 0, badFrame("RANGES runs %d disagree with frame length %d", runs, len(body)+1)
	}
	var sum uint64
	var prevLast uint64
	for i := 0; i < int(runs); i++ {
		first := be.Uint64(body[8+12*i:])
		count := be.Uint32(body[16+12*i:])
		if count == 0 {
			return 0, badFrame("RANGES run %d has count 0", i)
		}
		last := first + uint64(count) - 1
		if last < first || last&topBit != 0 {
			return 0, badFrame("RANGES run %d reaches past 2^63", i)
		}
		if i > 0 && first <= prevLast {
			return 0, badFrame("RANGES run %d does not start above the previous run", i)
		}
		prevLast = last
		sum += uint64(count)
	}
	if sum != uint64(total) {
		return 0, badFrame("RANGES counts sum to %d, total says %d", sum, total)
	}
	return int(total), nil
}

// expandRanges writes the IDs of a checked RANGES body into dst (len(dst) == total),
// continuing the connection's order after last. It returns the last ID.
func expandRanges(body []byte, dst []uint64, last uint64, any bool) (uint64, error) {
	be := binary.BigEndian
	runs := int(be.Uint32(body[4:]))
	k := 0
	for i := 0; i < runs; i++ {
		first := be.Uint64(body[8+12*i:])
		count := int(be.Uint32(body[16+12*i:]))
		if i == 0 && any && first <= last {
			return last, badFrame("RANGES: ID %d does not increase on %d", first, last)
		}
		for j := 0; j < count; j++ {
			dst[k] = first + uint64(j)
			k++
		}
		last = first + uint64(count) - 1
	}
	return last, nil
}

// valuesHeader is the mode and count of a VALUES body (already checked by frameHeader).
func valuesHeader(body []byte) (SequenceMode, int) {
	return SequenceMode(body[0]), int(binary.BigEndian.Uint32(body[1:]))
}

// parseValues decodes a VALUES body's values into dst (len(dst) == its count): each in
// 1 ..= 2^63 - 1, strictly increasing.
func parseValues(body []byte, dst []uint64) error {
	p := body[5:]
	var prev uint64
	for i := range dst {
		v := binary.BigEndian.Uint64(p[8*i:])
		if v == 0 || v&topBit != 0 {
			return badFrame("VALUES holds a value outside 1 ..= 2^63 - 1")
		}
		if v <= prev {
			return badFrame("VALUES: value %d does not increase on %d", v, prev)
		}
		dst[i] = v
		prev = v
	}
	return nil
}

// maskedIDsHeader is the key ID and count of a MASKED_IDS body (already checked by
// frameHeader).
func maskedIDsHeader(body []byte) (uint8, int) {
	return body[0], int(binary.BigEndian.Uint32(body[1:]))
}

// parseMaskedIDs decodes a MASKED_IDS body's masked values into dst (len(dst) == its count):
// each with the top bit clear (masked values are in no order).
func parseMaskedIDs(body []byte, dst []uint64) error {
	p := body[5:]
	for i := range dst {
		v := binary.BigEndian.Uint64(p[8*i:])
		if v&topBit != 0 {
			return badFrame("MASKED_IDS holds a value with the top bit set")
		}
		dst[i] = v
	}
	return nil
}

// parseError parses an ERROR body.
func parseError(body []byte) (Status, string, error) {
	status := Status(binary.BigEndian.Uint16(body))
	msg := body[2:]
	if !utf8.Valid(msg) {
		return status, "", badFrame("ERROR message is not UTF-8")
	}
	return status, string(msg), nil
}

// response is one decoded response frame (for tests and the handshake; the connection's
// reader decodes IDs straight into the caller's slice instead).
type response struct {
	op      byte
	hello   ServerHello
	ids     []uint64
	mode    SequenceMode // VALUES
	values  []uint64     // VALUES
	uuids   []UUID       // UUIDS
	keyID   uint8        // MASKED_IDS (its values in ids)
	token   uint64
	status  Status
	message string
}

// decodeResponse decodes the first response frame of buf: the frame and the bytes it
// used, or used == 0 while more bytes are needed.
func decodeResponse(buf []byte, maxFrame uint32, version uint16) (response, int, error) {
	size, err := frameHeader(buf, maxFrame, version)
	if err != nil || size == 0 || len(buf) < size {
		return response{}, 0, err
	}
	op, body := buf[4], buf[5:size]
	r := response{op: op}
	switch op {
	case opHelloOK:
		r.hello, err = parseHello(body)
	case opIDs:
		var n int
		if n, err = idsCount(body); err == nil {
			r.ids = make([]uint64, n)
			_, err = parseIDs(body, r.ids, 0, false)
		}
	case opRanges:
		var n int
		if n, err = rangesHeader(body); err == nil {
			r.ids = make([]uint64, n)
			_, err = expandRanges(body, r.ids, 0, false)
		}
	case opValues:
		var n int
		r.mode, n = valuesHeader(body)
		r.values = make([]uint64, n)
		err = parseValues(body, r.values)
	case opUUIDs:
		r.uuids = make([]UUID, uuidsCount(body))
		_, err = parseUUIDs(body, r.uuids, UUID{}, false)
	case opMaskedIDs:
		var n int
		r.keyID, n = maskedIDsHeader(body)
		r.ids = make([]uint64, n)
		err = parseMaskedIDs(body, r.ids)
	case opPong:
		r.token = binary.BigEndian.Uint64(body)
	case opError:
		r.status, r.message, err = parseError(body)
	}
	if err != nil {
		return response{}, 0, err
	}
	return r, size, nil
}
