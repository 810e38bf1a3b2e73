package idgen

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Sentinel errors, for errors.Is.
var (
	// ErrClosed: the client was closed (or the connection closed by the client).
	ErrClosed = errors.New("idgen: client closed")
	// ErrUnavailable matches every *UnavailableError, *TLSError and *NoNodeError: a node
	// (or every node) could not serve the call.
	ErrUnavailable = errors.New("idgen: unavailable")
	// ErrProtocol matches every *ProtocolError.
	ErrProtocol = errors.New("idgen: protocol error")
	// ErrInvalidArgument: a call's arguments were refused before anything was sent (a
	// sequence name that is not 1 to 64 bytes of a-z, 0-9, '.', '_' and '-' starting with a
	// letter or a digit, a count out of range). No node is tried and none is marked down.
	ErrInvalidArgument = errors.New("idgen: invalid argument")
	// ErrSequencesUnsupported matches every *VersionError: named sequences need protocol
	// version 3, and the node (or Options.MaxVersion) speaks an older one.
	ErrSequencesUnsupported = errors.New("idgen: named sequences need protocol version 3")
	// ErrUUIDsUnsupported matches every *VersionError of a UUID call (Required 4): UUIDs need
	// protocol version 4, and the node (or Options.MaxVersion) speaks an older one.
	ErrUUIDsUnsupported = errors.New("idgen: UUIDs need protocol version 4")
	// ErrIDsWithUnsupported matches every *VersionError of NextIDsWith or NextMaskedIDs
	// (Required 5): IDs after an ID, idempotency keys and masked IDs need protocol version 5,
	// and the node (or Options.MaxVersion) speaks an older one.
	ErrIDsWithUnsupported = errors.New("idgen: IDs with options (after, idempotency key, masked) need protocol version 5")
	// ErrKeyedNotRetried matches every *KeyedError: a call with an idempotency key failed
	// on its key's node in a way that another node might have served, and it was not tried
	// on another node (that would issue new IDs under the key).
	ErrKeyedNotRetried = errors.New("idgen: a call with an idempotency key is not retried on another node")
)

// argError is an ErrInvalidArgument with what was wrong.
func argError(format string, args ...any) error {
	return fmt.Errorf("idgen: "+format+": %w", append(args, ErrInvalidArgument)...)
}

// VersionError: a named-sequence call met a node that negotiated protocol version 1 or 2, or
// a UUID call one that negotiated a version below 4 (or the client offers no more than that:
// Options.MaxVersion). The call's requests are not reachable over that version; nothing was
// sent, no other node was tried and the node is not marked down. It matches
// ErrSequencesUnsupported (Required 3, or 0) or ErrUUIDsUnsupported (Required 4).
type VersionError struct {
	Node     string // "host:port" of the node; "" when Options.MaxVersion is the limit
	Version  uint16 // the version the node negotiated (or Options.MaxVersion)
	Required uint16 // the version the call needs: 3 (named sequences; also when 0), 4 (UUIDs) or 5 (IDs with options)
}

func (e *VersionError) what() (string, uint16) {
	if e.Required >= IDsWithVersion {
		return "IDs with options (after, idempotency key, masked)", e.Required
	}
	if e.Required >= UUIDsVersion {
		return "UUIDs", e.Required
	}
	return "named sequences", 3
}

func (e *VersionError) Error() string {
	what, required := e.what()
	if e.Node == "" {
		return fmt.Sprintf("idgen: the client offers protocol versions up to %d (Options.MaxVersion); %s need version %d", e.Version, what, required)
	}
	return fmt.Sprintf("idgen: %s: the node is too old: it speaks protocol version %d; %s need version %d", e.Node, e.Version, what, required)
}

// Is matches ErrSequencesUnsupported, ErrUUIDsUnsupported for a UUID call or
// ErrIDsWithUnsupported for NextIDsWith/NextMaskedIDs.
func (e *VersionError) Is(target error) bool {
	if e.Required >= IDsWithVersion {
		return target == ErrIDsWithUnsupported
	}
	if e.Required >= UUIDsVersion {
		return target == ErrUUIDsUnsupported
	}
	return target == ErrSequencesUnsupported
}

// KeyedError: a call with an idempotency key failed on the node its key maps to (a status
// whose "retry elsewhere" column is yes or that closes the connection, a connection that
// failed or a node backing off),
// and the client did not try another node, since another node does not know the key and
// would issue new IDs. Retry the same call later (it goes to the same node), or give up the
// key. It matches ErrKeyedNotRetried and unwraps to the node's error.
type KeyedError struct {
	Node string // the key's node
	Err  error
}

func (e *KeyedError) Error() string {
	return fmt.Sprintf("idgen: %s (the idempotency key's node) failed: %v; a keyed call is not retried on another node (it would issue new IDs): retry it later on the same node", e.Node, e.Err)
}

func (e *KeyedError) Unwrap() error { return e.Err }

// Is matches ErrKeyedNotRetried.
func (e *KeyedError) Is(target error) bool { return target == ErrKeyedNotRetried }

// Retrying a failed call on another node is always safe: a server never sends an ID twice,
// so a request that failed (or was abandoned) leaves at most a gap, never a duplicate.

// ServerError is an ERROR frame from a node. Act on Status only; Message is for humans.
// It unwraps to its Status, so errors.Is(err, idgen.StatusExhausted) works.
type ServerError struct {
	Status  Status
	Message string
	Node    string // "host:port" of the node that answered
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("idgen: %s: server error %s: %s", e.Node, e.Status.String(), e.Message)
}

// Unwrap returns the Status.
func (e *ServerError) Unwrap() error { return e.Status }

// Name is the status's name ("" for a code not in the protocol's table).
func (e *ServerError) Name() string { return e.Status.Name() }

// Closes reports whether the node closed the connection after this error.
func (e *ServerError) Closes() bool { return e.Status.Closes() }

// RetryElsewhere reports whether another node may serve the call (3xx but 304 EXHAUSTED).
func (e *ServerError) RetryElsewhere() bool { return e.Status.RetryElsewhere() }

// ProtocolError: the node sent something that breaks the protocol (a malformed frame, or a
// frame that does not answer its request). The connection is dropped and the node marked
// down. Status is 100 BAD_FRAME or 101 FRAME_TOO_LARGE for framing faults, 0 otherwise.
type ProtocolError struct {
	Status Status
	Detail string
	Node   string
}

func (e *ProtocolError) Error() string {
	node := ""
	if e.Node != "" {
		node = e.Node + ": "
	}
	if e.Status != 0 {
		return fmt.Sprintf("idgen: %sprotocol error (%s): %s", node, e.Status.String(), e.Detail)
	}
	return fmt.Sprintf("idgen: %sprotocol error: %s", node, e.Detail)
}

// Is matches ErrProtocol, and the Status of a framing fault.
func (e *ProtocolError) Is(target error) bool {
	if target == ErrProtocol {
		return true
	}
	s, ok := target.(Status)
	return ok && e.Status != 0 && s == e.Status
}

// UnavailableError: a node could not be reached or stopped answering (refused, reset,
// closed with requests unanswered, no answer within Options.RequestTimeout).
type UnavailableError struct {
	Node   string
	Detail string
	Err    error // the underlying error, if any

	// peerClosed: the node closed or reset an open connection (not a refused connect, not
	// a stall); a connection that sat idle may meet that once without the node being down.
	peerClosed bool
}

func (e *UnavailableError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("idgen: %s: %s: %v", e.Node, e.Detail, e.Err)
	}
	return fmt.Sprintf("idgen: %s: %s", e.Node, e.Detail)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Is matches ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// TLSErrorKind names why a TLS connection failed.
type TLSErrorKind string

// The kinds of TLSError.
const (
	// The node's certificate does not chain to the trusted authorities.
	TLSUnknownIssuer TLSErrorKind = "unknown_issuer"
	// The node's certificate does not name the host dialed (or Options' server name).
	TLSNameMismatch TLSErrorKind = "name_mismatch"
	// The node's certificate has expired.
	TLSExpired TLSErrorKind = "expired"
	// The node's certificate is not valid yet.
	TLSNotYetValid TLSErrorKind = "not_yet_valid"
	// The node's certificate is unacceptable for another reason.
	TLSBadCertificate TLSErrorKind = "bad_certificate"
	// The node requires a client certificate and none was sent.
	TLSClientCertificateRequired TLSErrorKind = "client_certificate_required"
	// The node refused the client certificate (another authority, expired, ...).
	TLSClientCertificateRejected TLSErrorKind = "client_certificate_rejected"
	// Any other failure, e.g. the port does not speak TLS.
	TLSHandshake TLSErrorKind = "handshake"
)

// TLSError: the TLS connection to a node failed. It is a node fault like an
// UnavailableError (errors.Is(err, ErrUnavailable) holds): the node is marked down and the
// call fails over. A certificate that does not verify is a configuration fault: retrying
// the same node with the same trust does not help.
type TLSError struct {
	Node string
	Kind TLSErrorKind
	Err  error
}

func (e *TLSError) Error() string {
	return fmt.Sprintf("idgen: %s: TLS (%s): %v", e.Node, e.Kind, e.Err)
}

func (e *TLSError) Unwrap() error { return e.Err }

// Is matches ErrUnavailable.
func (e *TLSError) Is(target error) bool { return target == ErrUnavailable }

// NoNodeError: no node could serve the call. Errors maps each node ("host:port") to its
// last error (nil for a node never tried); RetryIn maps each node that is backing off to
// the time left before it is tried again.
type NoNodeError struct {
	Errors  map[string]error
	RetryIn map[string]time.Duration
	last    error
}

func (e *NoNodeError) Error() string {
	nodes := make([]string, 0, len(e.Errors))
	for n := range e.Errors {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	parts := make([]string, 0, len(nodes))
	for _, n := range nodes {
		text := n + ": no error recorded"
		if err := e.Errors[n]; err != nil {
			text = err.Error()
		}
		if d, ok := e.RetryIn[n]; ok {
			text += fmt.Sprintf(" (down, retried in %s)", d.Round(time.Millisecond))
		}
		parts = append(parts, text)
	}
	return "idgen: no node available; " + strings.Join(parts, "; ")
}

// Unwrap returns the last error of the call (nil when no node could be tried).
func (e *NoNodeError) Unwrap() error { return e.last }

// Is matches ErrUnavailable.
func (e *NoNodeError) Is(target error) bool { return target == ErrUnavailable }
