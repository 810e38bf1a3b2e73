package idgen

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"
)

// Observability (clients/vectors/CONFIG.md): the client reports what it does as events, to
// Options.Logger and to Options.Hooks. With neither set nothing is built or logged.

// Logger receives the client's log records: the message is the event's name, args its
// fields as alternating keys and values. It is the set of *slog.Logger's level methods, so
// on Go 1.21 and later a *slog.Logger is a Logger as it is (Options{Logger: slog.Default()}).
// This module's go.mod says Go 1.19, which has no log/slog: hence the interface rather
// than a *slog.Logger field. Levels: debug for connect and request, info for refused and
// node_up, warning for connect_failed, failover, node_down and a panicking hook.
type Logger interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// Hooks receives every event, synchronously, after the fact, on the goroutine that made it
// happen (for metrics and tracing). A hook must not block for long; a hook that panics is
// recovered, logged once at warning (the first panic only) and otherwise ignored: it never
// fails or changes a call.
type Hooks interface {
	OnEvent(Event)
}

// HookFunc is a function used as Hooks.
type HookFunc func(Event)

// OnEvent calls f(e).
func (f HookFunc) OnEvent(e Event) { f(e) }

// The event names.
const (
	EventConnect       = "connect"        // a connection to a node is up (TLS and HELLO done)
	EventConnectFailed = "connect_failed" // a connect to a node failed
	EventRequest       = "request"        // a call to the nodes finished (once per call)
	EventRefused       = "refused"        // a node answered an error status
	EventFailover      = "failover"       // a call moves on from one node to another
	EventNodeDown      = "node_down"      // a node is marked down (back-off)
	EventNodeUp        = "node_up"        // a node that had failed served a call again
)

// Event is one event. Name says which; the fields each event carries are set, the others
// are zero (see Fields).
type Event struct {
	Name string
	// Node: "host:port" of the node (as configured, or an address of an expanded name).
	Node string
	// Address: connect: the address the connection went to.
	Address string
	// Version: connect: the protocol version negotiated.
	Version uint16
	// Duration: connect, connect_failed: the connect's; request: the call's.
	Duration time.Duration
	// Err: connect_failed: why; request: the call's error (nil: ok).
	Err error
	// Op: request, refused: ids, ranges, values, uuids, ids_with, masked_ids or ping.
	Op string
	// Count: request: the count asked for (1 for ping).
	Count int
	// Outcome: request: "ok", a status name (EXHAUSTED, ...) or the error's kind
	// (unavailable, tls, protocol, invalid_argument, version, keyed_not_retried, closed,
	// canceled, deadline_exceeded).
	Outcome string
	// Status: refused: the status (its number; Status.Name() its name). Message: its text.
	Status  Status
	Message string
	// From, To: failover: the node left and the node tried next ("" if none is left).
	From, To string
	// Reason: failover, node_down, node_up: why.
	Reason string
}

// Fields are the event's fields as the log records carry them, keys and values alternating.
func (e Event) Fields() []any {
	errText := func() string {
		if e.Err == nil {
			return ""
		}
		return e.Err.Error()
	}
	switch e.Name {
	case EventConnect:
		return []any{"node", e.Node, "address", e.Address, "version", e.Version, "duration", e.Duration}
	case EventConnectFailed:
		return []any{"node", e.Node, "error", errText(), "duration", e.Duration}
	case EventRequest:
		return []any{"op", e.Op, "count", e.Count, "node", e.Node, "duration", e.Duration, "outcome", e.Outcome}
	case EventRefused:
		return []any{"node", e.Node, "op", e.Op, "status", int(e.Status), "status_name", e.Status.Name(), "message", e.Message}
	case EventFailover:
		return []any{"from", e.From, "to", e.To, "reason", e.Reason}
	case EventNodeDown, EventNodeUp:
		return []any{"node", e.Node, "reason", e.Reason}
	}
	return nil
}

// observer sends events to the logger and the hooks.
type observer struct {
	logger      Logger // nil: no logging
	hooks       Hooks  // nil: no hooks
	hookPanics  atomic.Int64
	loggedPanic atomic.Bool
}

func newObserver(l Logger, h Hooks) *observer {
	if isNil(l) {
		l = nil
	}
	if isNil(h) {
		h = nil
	}
	return &observer{logger: l, hooks: h}
}

// isNil reports whether v is nil or an interface holding a nil pointer (a nil *slog.Logger).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Interface, reflect.Chan, reflect.Slice:
		return r.IsNil()
	}
	return false
}

// on reports whether anyone listens (events need not be built otherwise).
func (o *observer) on() bool { return o.logger != nil || o.hooks != nil }

func (o *observer) emit(e Event) {
	if o.logger != nil {
		args := e.Fields()
		switch e.Name {
		case EventConnect, EventRequest:
			o.logger.Debug(e.Name, args...)
		case EventRefused, EventNodeUp:
			o.logger.Info(e.Name, args...)
		default:
			o.logger.Warn(e.Name, args...)
		}
	}
	if o.hooks != nil {
		o.callHook(e)
	}
}

func (o *observer) callHook(e Event) {
	defer func() {
		if r := recover(); r != nil {
			o.hookPanics.Add(1)
			if o.logger != nil && !o.loggedPanic.Swap(true) {
				o.logger.Warn("hook_panicked", "event", e.Name, "panic", fmt.Sprint(r),
					"note", "the hook's panics are ignored; only this first one is logged")
			}
		}
	}()
	o.hooks.OnEvent(e)
}

// outcomeOf names a call's result for the request event.
func outcomeOf(err error) string {
	if err == nil {
		return "ok"
	}
	var se *ServerError
	var te *TLSError
	switch {
	case errors.As(err, &se):
		if name := se.Name(); name != "" {
			return name
		}
		return fmt.Sprintf("status_%d", uint16(se.Status))
	case errors.Is(err, ErrInvalidArgument):
		return "invalid_argument"
	case errors.Is(err, ErrKeyedNotRetried):
		return "keyed_not_retried"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.As(err, &te):
		return "tls"
	case errors.Is(err, ErrProtocol):
		return "protocol"
	case errors.Is(err, ErrSequencesUnsupported), errors.Is(err, ErrUUIDsUnsupported), errors.Is(err, ErrIDsWithUnsupported):
		return "version"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	}
	return "error"
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
