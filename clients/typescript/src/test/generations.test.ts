// Layout generations: every case of clients/vectors/layouts.json, and lists that break the rules.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { LayoutGenerations } from "../generations.js";
import { loadJson } from "./support.js";

interface Cluster {
  name: string;
  layouts: Record<string, unknown>[];
  decode: { id: string; layout_generation: number; unix_ms: number; timestamp: number; worker: number; region: number; sequence: number }[];
  invalid: string[];
}

const V = loadJson("clients/vectors/layouts.json") as { clusters: Cluster[] };

describe("layout generations", () => {
  test("every vector decodes", () => {
    assert.ok(V.clusters.length >= 3);
    for (const c of V.clusters) {
      const gens = LayoutGenerations.fromJson({ layouts: c.layouts });
      for (const d of c.decode) {
        const { generation, parts } = gens.decode(BigInt(d.id));
        assert.deepEqual(
          { id: d.id, layout_generation: generation, unix_ms: parts.unixMs, timestamp: parts.timestamp, worker: parts.worker, region: parts.region, sequence: parts.sequence },
          d,
          c.name,
        );
      }
      for (const bad of c.invalid) assert.throws(() => gens.decode(BigInt(bad)), RangeError);
    }
  });

  test("lists that break the rules are refused", () => {
    const good = V.clusters[0].layouts;
    const changed = (i: number, kv: Record<string, unknown>) => good.map((g, j) => (j === i ? { ...g, ...kv } : g));
    for (const bad of [
      [],
      changed(1, { first_id_str: "12345" }),
      changed(1, { switch_unix_ms: null }),
      changed(1, { timestamp_bits: 43 }),
      changed(1, { epoch_ms: good[0].epoch_ms }),
      changed(1, { layout_generation: 2 }),
    ]) {
      assert.throws(() => LayoutGenerations.fromJson(bad), RangeError, JSON.stringify(bad).slice(0, 80));
    }
  });
});
