package idgen

import (
	"errors"
	"fmt"
	"math"
)

// Time bounds for range queries (clients/vectors/BOUNDS.md): IDs sort by time first, so
// the IDs of a time interval are one range of IDs.

var (
	// ErrBeforeEpoch: a time before the layout's epoch (a negative one included); no ID
	// has it.
	ErrBeforeEpoch = errors.New("idgen: time before the layout's epoch")
	// ErrAfterLastTimestamp: a time after the layout's last millisecond; no ID has it.
	ErrAfterLastTimestamp = errors.New("idgen: time after the layout's last timestamp")
	// ErrEmptyInterval: an interval [from, to) with to <= from.
	ErrEmptyInterval = errors.New("idgen: empty time interval")
)

// LastUnixMs is the last Unix millisecond an ID of the layout can hold
// (EpochMs + 2^TimestampBits - 1, saturating).
func (l Layout) LastUnixMs() uint64 {
	span := uint64(1)<<l.TimestampBits - 1
	if l.EpochMs > math.MaxUint64-span {
		return math.MaxUint64
	}
	return l.EpochMs + span
}

func (l Layout) shift() uint { return uint(l.WorkerBits) + uint(l.SequenceBits) }

func (l Layout) timestampAt(name string, unixMs int64) (uint64, error) {
	if unixMs < 0 || uint64(unixMs) < l.EpochMs {
		return 0, fmt.Errorf("%w: %s %d ms is before the epoch %d ms", ErrBeforeEpoch, name, unixMs, l.EpochMs)
	}
	if uint64(unixMs) > l.LastUnixMs() {
		return 0, fmt.Errorf("%w: %s %d ms is after the last timestamp %d ms", ErrAfterLastTimestamp, name, unixMs, l.LastUnixMs())
	}
	return uint64(unixMs) - l.EpochMs, nil
}

// MinIDAt is the smallest ID at unixMs (ms since the Unix epoch): worker 0, sequence 0.
// It fails with ErrBeforeEpoch or ErrAfterLastTimestamp for a time the layout cannot hold.
func (l Layout) MinIDAt(unixMs int64) (uint64, error) {
	t, err := l.timestampAt("time", unixMs)
	if err != nil {
		return 0, err
	}
	return t << l.shift(), nil
}

// MaxIDAt is the largest ID at unixMs: the last worker of the last region, the last
// sequence.
func (l Layout) MaxIDAt(unixMs int64) (uint64, error) {
	t, err := l.timestampAt("time", unixMs)
	if err != nil {
		return 0, err
	}
	return t<<l.shift() | (uint64(1)<<l.shift() - 1), nil
}

// Bounds gives lo and hi for the interval [fromMs, toMs): every ID whose time lies in it,
// and no other, satisfies lo <= id < hi (for SQL: WHERE id >= lo AND id < hi; the
// interval's largest ID is hi - 1). toMs may be at most LastUnixMs, so hi fits an int64.
// It fails with ErrBeforeEpoch, ErrAfterLastTimestamp or ErrEmptyInterval.
func (l Layout) Bounds(fromMs, toMs int64) (lo, hi uint64, err error) {
	f, err := l.timestampAt("from", fromMs)
	if err != nil {
		return 0, 0, err
	}
	if toMs <= fromMs {
		return 0, 0, fmt.Errorf("%w: [%d, %d) ms: the end must be after the start", ErrEmptyInterval, fromMs, toMs)
	}
	t, err := l.timestampAt("to", toMs)
	if err != nil {
		return 0, 0, err
	}
	return f << l.shift(), t << l.shift(), nil
}
