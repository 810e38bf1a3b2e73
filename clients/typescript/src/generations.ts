// A cluster's layout generations: the layouts it has used over its life, each from its switch
// time on (GET /layout's "layouts"; clients/vectors/LAYOUTS.md). Every ID of a later generation
// is greater than every ID of an earlier one: an ID belongs to the generation with the largest
// firstId at or below it and is taken apart with that generation's layout.

import { Layout, type IdParts } from "./client.js";
import { checkId } from "./forms.js";

/** One layout generation. */
export interface LayoutGeneration {
  readonly generation: number;
  /** Its smallest ID: every ID of the generation is at or above it. */
  readonly firstId: bigint;
  /** When it took over (Unix ms); null for generation 0. */
  readonly switchUnixMs: bigint | null;
  readonly layout: Layout;
}

function int(o: Record<string, unknown>, key: string): bigint {
  const v = o[key];
  if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return BigInt(v);
  if (typeof v === "bigint" && v >= 0n) return v;
  throw new RangeError(`a layout generation without a non-negative integer ${JSON.stringify(key)}`);
}

function small(o: Record<string, unknown>, key: string): number {
  return Number(int(o, key));
}

/** The layout generations of a cluster, generation 0 first, checked against LAYOUTS.md's rules. */
export class LayoutGenerations {
  readonly generations: readonly LayoutGeneration[];

  constructor(generations: readonly LayoutGeneration[]) {
    if (generations.length === 0) throw new RangeError("no layout generations");
    generations.forEach((g, i) => {
      const l = g.layout;
      if (Math.min(l.timestampBits, l.workerBits, l.sequenceBits) < 1 || l.idBits > 63 || l.idBits < 32 || l.regionBits > l.workerBits) {
        throw new RangeError(`layout generation ${i} is not a valid layout`);
      }
      if (g.generation !== i) throw new RangeError(`layout generation ${g.generation} listed as number ${i}`);
      if (i === 0) {
        if (g.firstId !== 0n || g.switchUnixMs !== null) throw new RangeError("layout generation 0 has firstId 0 and no switch");
        return;
      }
      const prev = generations[i - 1];
      if (l.idBits !== prev.layout.idBits) throw new RangeError(`layout generation ${i} changes the ID width`);
      if (g.switchUnixMs === null || (prev.switchUnixMs !== null && g.switchUnixMs <= prev.switchUnixMs)) {
        throw new RangeError(`layout generation ${i} needs a switch after the one before`);
      }
      const want = (g.switchUnixMs - prev.layout.epochMs) << BigInt(prev.layout.workerBits + prev.layout.sequenceBits);
      if (g.switchUnixMs < prev.layout.epochMs || g.firstId !== want) {
        throw new RangeError(`layout generation ${i}: firstId ${g.firstId}, its switch gives ${want}`);
      }
      const ts = g.switchUnixMs - l.epochMs;
      if (ts < 0n || ts << BigInt(l.workerBits + l.sequenceBits) < g.firstId) {
        throw new RangeError(`layout generation ${i}: its epoch is too late for IDs to keep increasing`);
      }
    });
    this.generations = [...generations];
  }

  /** From a node's GET /layout answer (parsed JSON) or its "layouts" list. */
  static fromJson(body: unknown): LayoutGenerations {
    const list = Array.isArray(body) ? body : (body as { layouts?: unknown } | null)?.layouts;
    if (!Array.isArray(list)) throw new TypeError('expected GET /layout\'s body or its "layouts" list');
    return new LayoutGenerations(
      list.map((item: unknown) => {
        const o = item as Record<string, unknown>;
        const firstId = typeof o.first_id_str === "string" ? BigInt(o.first_id_str) : int(o, "first_id");
        return {
          generation: small(o, "layout_generation"),
          firstId,
          switchUnixMs: o.switch_unix_ms === null || o.switch_unix_ms === undefined ? null : int(o, "switch_unix_ms"),
          layout: new Layout({
            epochMs: int(o, "epoch_ms"),
            timestampBits: small(o, "timestamp_bits"),
            workerBits: small(o, "worker_bits"),
            sequenceBits: small(o, "sequence_bits"),
            regionBits: small(o, "region_bits"),
          }),
        };
      }),
    );
  }

  /** The generation `id` belongs to; a RangeError for a value outside `0 .. 2^W`. */
  generationOf(id: bigint): LayoutGeneration {
    checkId(id);
    const first = this.generations[0].layout;
    if (id > first.maxId) throw new RangeError(`${id} is not an ID of this cluster: its IDs are ${first.idBits} bits wide`);
    for (let i = this.generations.length - 1; i >= 0; i--) {
      if (this.generations[i].firstId <= id) return this.generations[i];
    }
    return this.generations[0];
  }

  /** `id`'s generation number and its fields under that generation's layout. */
  decode(id: bigint): { generation: number; parts: IdParts } {
    const g = this.generationOf(id);
    return { generation: g.generation, parts: g.layout.decode(id) };
  }
}
