package idgen

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

type layoutsVectors struct {
	Clusters []struct {
		Name    string            `json:"name"`
		Layouts []json.RawMessage `json:"layouts"`
		Decode  []struct {
			ID               string `json:"id"`
			LayoutGeneration uint32 `json:"layout_generation"`
			UnixMs           uint64 `json:"unix_ms"`
			Timestamp        uint64 `json:"timestamp"`
			Worker           uint32 `json:"worker"`
			Region           uint32 `json:"region"`
			Sequence         uint32 `json:"sequence"`
		} `json:"decode"`
		Invalid []string `json:"invalid"`
	} `json:"clusters"`
}

func TestLayoutGenerationsVectors(t *testing.T) {
	var v layoutsVectors
	loadJSON(t, "clients/vectors/layouts.json", &v)
	if len(v.Clusters) < 3 {
		t.Fatalf("only %d clusters", len(v.Clusters))
	}
	for _, c := range v.Clusters {
		raw, _ := json.Marshal(map[string]any{"layouts": c.Layouts})
		gens, err := ParseLayoutGenerations(raw)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for _, d := range c.Decode {
			id, _ := strconv.ParseUint(d.ID, 10, 64)
			g, p, err := gens.Decode(id)
			if err != nil {
				t.Fatalf("%s: %d: %v", c.Name, id, err)
			}
			if g != d.LayoutGeneration || p.UnixMs != d.UnixMs || p.Timestamp != d.Timestamp || p.Worker != d.Worker || p.Region != d.Region || p.Sequence != d.Sequence {
				t.Errorf("%s: %d: got generation %d %+v, want %+v", c.Name, id, g, p, d)
			}
		}
		for _, bad := range c.Invalid {
			id, _ := strconv.ParseUint(bad, 10, 64)
			if _, _, err := gens.Decode(id); err == nil {
				t.Errorf("%s: %d decoded", c.Name, id)
			}
		}
	}
}

func TestLayoutGenerationsRefuseBrokenLists(t *testing.T) {
	var v layoutsVectors
	loadJSON(t, "clients/vectors/layouts.json", &v)
	good, _ := json.Marshal(v.Clusters[0].Layouts)
	text := string(good)
	var list []map[string]any
	_ = json.Unmarshal(good, &list)
	changed := func(i int, key string, value any) []byte {
		var l []map[string]any
		_ = json.Unmarshal(good, &l)
		l[i][key] = value
		out, _ := json.Marshal(l)
		return out
	}
	for name, bad := range map[string][]byte{
		"empty":           []byte("[]"),
		"wrong first_id":  changed(1, "first_id_str", "12345"),
		"no switch":       changed(1, "switch_unix_ms", nil),
		"another width":   changed(1, "timestamp_bits", 43),
		"epoch too late":  changed(1, "epoch_ms", list[0]["epoch_ms"]),
		"numbering":       changed(1, "layout_generation", 2),
		"not JSON layout": []byte(`{"x": 1}`),
	} {
		if _, err := ParseLayoutGenerations(bad); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	if !strings.Contains(text, "first_id_str") {
		t.Fatal("the vectors carry first_id_str")
	}
}
