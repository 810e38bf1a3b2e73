package idgen

import "strconv"

// Status is the status code of an ERROR frame (PROTOCOL.md section 5).
//
// A Status is an error, so a caller can test for one with errors.Is:
//
//	if errors.Is(err, idgen.StatusExhausted) { ... }
//
// and any *ServerError unwraps to its Status.
type Status uint16

// The status codes of the protocol's table.
const (
	StatusBadFrame               Status = 100
	StatusFrameTooLarge          Status = 101
	StatusHandshakeRequired      Status = 102
	StatusUnsupportedVersion     Status = 103
	StatusInvalidCount           Status = 200
	StatusBatchTooLarge          Status = 201
	StatusUnknownOpcode          Status = 202
	StatusUnknownSequence        Status = 203 // version 3
	StatusInvalidSequenceName    Status = 204 // version 3
	StatusInvalidOption          Status = 205 // version 5
	StatusIdempotencyKeyReused   Status = 206 // version 5
	StatusIdempotencyKeyInFlight Status = 207 // version 5
	StatusUnavailableLease       Status = 300
	StatusUnavailableClock       Status = 301
	StatusShuttingDown           Status = 302
	StatusOverloaded             Status = 303
	StatusExhausted              Status = 304
	StatusRangeChanged           Status = 305
	StatusBusy                   Status = 306
	StatusSequenceUsedUp         Status = 307 // version 3
	StatusSequenceUnavailable    Status = 308 // version 3
	StatusInternal               Status = 500
)

// StatusInfo is one row of the protocol's status table.
type StatusInfo struct {
	Code Status
	Name string
	// Closes: the server closes the connection after this ERROR.
	Closes bool
	// RetryElsewhere: this node cannot serve now; another node may.
	RetryElsewhere bool
}

// Statuses is the protocol's status table (PROTOCOL.md section 5), in code order.
var Statuses = []StatusInfo{
	{StatusBadFrame, "BAD_FRAME", true, false},
	{StatusFrameTooLarge, "FRAME_TOO_LARGE", true, false},
	{StatusHandshakeRequired, "HANDSHAKE_REQUIRED", true, false},
	{StatusUnsupportedVersion, "UNSUPPORTED_VERSION", true, false},
	{StatusInvalidCount, "INVALID_COUNT", false, false},
	{StatusBatchTooLarge, "BATCH_TOO_LARGE", false, false},
	{StatusUnknownOpcode, "UNKNOWN_OPCODE", false, false},
	{StatusUnknownSequence, "UNKNOWN_SEQUENCE", false, false},
	{StatusInvalidSequenceName, "INVALID_SEQUENCE_NAME", false, false},
	{StatusInvalidOption, "INVALID_OPTION", false, false},
	{StatusIdempotencyKeyReused, "IDEMPOTENCY_KEY_REUSED", false, false},
	{StatusIdempotencyKeyInFlight, "IDEMPOTENCY_KEY_IN_FLIGHT", false, false},
	{StatusUnavailableLease, "UNAVAILABLE_LEASE", false, true},
	{StatusUnavailableClock, "UNAVAILABLE_CLOCK", false, true},
	{StatusShuttingDown, "SHUTTING_DOWN", true, true},
	{StatusOverloaded, "OVERLOADED", true, true},
	{StatusExhausted, "EXHAUSTED", false, false},
	{StatusRangeChanged, "RANGE_CHANGED", true, true},
	{StatusBusy, "BUSY", false, true},
	{StatusSequenceUsedUp, "SEQUENCE_USED_UP", false, false},
	{StatusSequenceUnavailable, "SEQUENCE_UNAVAILABLE", false, true},
	{StatusInternal, "INTERNAL", true, false},
}

func (s Status) info() (StatusInfo, bool) {
	for _, i := range Statuses {
		if i.Code == s {
			return i, true
		}
	}
	return StatusInfo{}, false
}

// Known reports whether the code is in the protocol's table.
func (s Status) Known() bool {
	_, ok := s.info()
	return ok
}

// Name is the status's name from the table, or "" for a code not in it.
func (s Status) Name() string {
	i, _ := s.info()
	return i.Name
}

// Closes reports whether the server closes the connection after an ERROR with this status.
// Codes not in the table follow their class: 2xx and 3xx keep the connection open, every
// other code closes it.
func (s Status) Closes() bool {
	if i, ok := s.info(); ok {
		return i.Closes
	}
	return !(s >= 200 && s <= 399)
}

// RetryElsewhere reports whether another node may serve the request. Codes not in the
// table follow their class: 3xx means try another node.
func (s Status) RetryElsewhere() bool {
	if i, ok := s.info(); ok {
		return i.RetryElsewhere
	}
	return s >= 300 && s <= 399
}

// String is "305 RANGE_CHANGED", or "399 UNKNOWN" for a code not in the table.
func (s Status) String() string {
	name := s.Name()
	if name == "" {
		name = "UNKNOWN"
	}
	return strconv.Itoa(int(s)) + " " + name
}

// Error makes a Status usable as an errors.Is target.
func (s Status) Error() string { return "idgen status " + s.String() }
