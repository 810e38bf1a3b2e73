package idgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// LayoutGeneration is one layout generation of a cluster (clients/vectors/LAYOUTS.md).
type LayoutGeneration struct {
	Generation uint32
	// FirstID is the generation's smallest ID: every ID of it is at or above FirstID.
	FirstID uint64
	// SwitchUnixMs is when it took over; nil for generation 0.
	SwitchUnixMs *uint64
	Layout       Layout
}

// LayoutGenerations are the layouts a cluster has used over its life, generation 0 first,
// each from its switch time on (GET /layout's "layouts"). Every ID of a later generation is
// greater than every ID of an earlier one: an ID belongs to the generation with the largest
// FirstID at or below it and is taken apart with that generation's layout.
type LayoutGenerations struct {
	gens []LayoutGeneration
}

// NewLayoutGenerations checks gens against LAYOUTS.md's rules: generation 0 first (FirstID
// 0, no switch), consecutive numbers, one ID width, each FirstID the one its switch gives,
// switches increasing, an epoch early enough that IDs keep increasing.
func NewLayoutGenerations(gens []LayoutGeneration) (*LayoutGenerations, error) {
	if len(gens) == 0 {
		return nil, errors.New("idgen: no layout generations")
	}
	for i, g := range gens {
		l := g.Layout
		if l.TimestampBits < 1 || l.WorkerBits < 1 || l.SequenceBits < 1 || l.IDBits() > 63 || l.IDBits() < 32 || l.RegionBits > l.WorkerBits {
			return nil, fmt.Errorf("idgen: layout generation %d is not a valid layout", i)
		}
		if g.Generation != uint32(i) {
			return nil, fmt.Errorf("idgen: layout generation %d listed as number %d", g.Generation, i)
		}
		if i == 0 {
			if g.FirstID != 0 || g.SwitchUnixMs != nil {
				return nil, errors.New("idgen: layout generation 0 has first_id 0 and no switch")
			}
			continue
		}
		prev := gens[i-1]
		if l.IDBits() != prev.Layout.IDBits() {
			return nil, fmt.Errorf("idgen: layout generation %d changes the ID width", i)
		}
		if g.SwitchUnixMs == nil || (prev.SwitchUnixMs != nil && *g.SwitchUnixMs <= *prev.SwitchUnixMs) {
			return nil, fmt.Errorf("idgen: layout generation %d needs a switch after the one before", i)
		}
		s := *g.SwitchUnixMs
		if s < prev.Layout.EpochMs {
			return nil, fmt.Errorf("idgen: layout generation %d switches before the layout before it begins", i)
		}
		want := (s - prev.Layout.EpochMs) << (uint(prev.Layout.WorkerBits) + uint(prev.Layout.SequenceBits))
		if g.FirstID != want {
			return nil, fmt.Errorf("idgen: layout generation %d: first_id %d, its switch gives %d", i, g.FirstID, want)
		}
		if s < l.EpochMs || (s-l.EpochMs)<<(uint(l.WorkerBits)+uint(l.SequenceBits)) < g.FirstID {
			return nil, fmt.Errorf("idgen: layout generation %d: its epoch is too late for IDs to keep increasing", i)
		}
	}
	return &LayoutGenerations{gens: append([]LayoutGeneration(nil), gens...)}, nil
}

type layoutJSON struct {
	LayoutGeneration *uint32 `json:"layout_generation"`
	FirstID          *uint64 `json:"first_id"`
	FirstIDStr       *string `json:"first_id_str"`
	SwitchUnixMs     *uint64 `json:"switch_unix_ms"`
	EpochMs          *uint64 `json:"epoch_ms"`
	TimestampBits    *uint8  `json:"timestamp_bits"`
	WorkerBits       *uint8  `json:"worker_bits"`
	SequenceBits     *uint8  `json:"sequence_bits"`
	RegionBits       *uint8  `json:"region_bits"`
}

// ParseLayoutGenerations reads a node's GET /layout answer, or its "layouts" list alone.
func ParseLayoutGenerations(data []byte) (*LayoutGenerations, error) {
	var list []layoutJSON
	if err := json.Unmarshal(data, &list); err != nil {
		var body struct {
			Layouts []layoutJSON `json:"layouts"`
		}
		if err2 := json.Unmarshal(data, &body); err2 != nil || body.Layouts == nil {
			return nil, errors.New(`idgen: expected GET /layout's body or its "layouts" list`)
		}
		list = body.Layouts
	}
	gens := make([]LayoutGeneration, 0, len(list))
	for i, o := range list {
		if o.LayoutGeneration == nil || o.EpochMs == nil || o.TimestampBits == nil || o.WorkerBits == nil || o.SequenceBits == nil || o.RegionBits == nil {
			return nil, fmt.Errorf("idgen: layout generation %d misses a field", i)
		}
		var first uint64
		switch {
		case o.FirstIDStr != nil:
			v, err := strconv.ParseUint(*o.FirstIDStr, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("idgen: layout generation %d: first_id_str: %v", i, err)
			}
			first = v
		case o.FirstID != nil:
			first = *o.FirstID
		default:
			return nil, fmt.Errorf("idgen: layout generation %d has no first_id", i)
		}
		gens = append(gens, LayoutGeneration{
			Generation:   *o.LayoutGeneration,
			FirstID:      first,
			SwitchUnixMs: o.SwitchUnixMs,
			Layout: Layout{EpochMs: *o.EpochMs, TimestampBits: *o.TimestampBits, WorkerBits: *o.WorkerBits,
				SequenceBits: *o.SequenceBits, RegionBits: *o.RegionBits},
		})
	}
	return NewLayoutGenerations(gens)
}

// Generations returns every generation, generation 0 first.
func (g *LayoutGenerations) Generations() []LayoutGeneration {
	return append([]LayoutGeneration(nil), g.gens...)
}

// GenerationOf returns the generation id belongs to; an error for a value outside 0 .. 2^W.
func (g *LayoutGenerations) GenerationOf(id uint64) (LayoutGeneration, error) {
	first := g.gens[0].Layout
	if err := checkID(id, "ID"); err != nil {
		return LayoutGeneration{}, err
	}
	if id > first.MaxID() {
		return LayoutGeneration{}, &FormError{Form: "integer", Text: strconv.FormatUint(id, 10), Kind: FormOutOfRange,
			Reason: fmt.Sprintf("not an ID of this cluster: its IDs are %d bits wide", first.IDBits())}
	}
	for i := len(g.gens) - 1; i >= 0; i-- {
		if g.gens[i].FirstID <= id {
			return g.gens[i], nil
		}
	}
	return g.gens[0], nil
}

// Decode returns id's generation number and its fields under that generation's layout.
func (g *LayoutGenerations) Decode(id uint64) (uint32, IDParts, error) {
	gen, err := g.GenerationOf(id)
	if err != nil {
		return 0, IDParts{}, err
	}
	p, err := gen.Layout.Decode(id)
	return gen.Generation, p, err
}
