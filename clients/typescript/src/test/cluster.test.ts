// Real nodes sharing one worker space through a real etcd: a node killed under load
// (failover to the other, no duplicate) and a lease change (the node takes another worker
// range and closes its connections with RANGE_CHANGED; the client reconnects and learns it).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, Layout } from "../client.js";
import { ServerError, UnavailableError } from "../errors.js";
import { PrefetchPool } from "../prefetch.js";
import { Etcd, NodeProc, allDistinct, sleep } from "./support.js";

interface WorkerRecord {
  state: string;
  owner: { node_id: string; host: string; pid: number; started_unix_ms: number; instance: string };
  generation: number;
  lease_end: number;
  count: number;
  layout_version: number;
  written_unix_ms: number;
}

const NODE_ARGS = ["--lease-ttl", "2s", "--shards", "2"];

/** Worker ranges held in the store, by owner pid: [first, count]. */
async function ranges(etcd: Etcd, prefix: string): Promise<Map<number, [number, number]>> {
  const out = new Map<number, [number, number]>();
  for (const [key, value] of await etcd.range(`${prefix}/idgen/default/workers/`)) {
    const r = JSON.parse(value) as WorkerRecord;
    if (r.state === "held") out.set(r.owner.pid, [Number(key.split("/").pop()), r.count]);
  }
  return out;
}

describe("a cluster on etcd", () => {
  let etcd: Etcd;
  before(async () => {
    etcd = await Etcd.start();
  });
  after(async () => {
    await etcd?.stop();
  });

  test("a node killed under concurrent load: every call is served by the other, no ID twice", async () => {
    const prefix = "ts-kill";
    const doomed = await NodeProc.start(NODE_ARGS, { store: etcd.store(prefix) });
    const survivor = await NodeProc.start(NODE_ARGS, { store: etcd.store(prefix) });
    const client = new Client([doomed.addr, survivor.addr], { timeoutMs: 2000, backoffMinMs: 500 });
    const pool = new PrefetchPool(client, { size: 256 });
    try {
      const held = await ranges(etcd, prefix);
      const survivorRange = held.get(survivor.pid)!;
      assert.ok(held.get(doomed.pid) && survivorRange, `both nodes hold workers: ${JSON.stringify([...held])}`);
      const layout = await client.layout();
      let killed = false;
      let received = 0;
      const afterKill = 30;
      const worker = async () => {
        const got: { killed: boolean; ids: bigint[] }[] = [];
        let calls = 0;
        const deadline = Date.now() + 60_000;
        while (calls < afterKill && Date.now() < deadline) {
          const wasKilled = killed;
          const ids = [...(await client.nextIds(25)), await pool.next()];
          got.push({ killed: wasKilled, ids });
          received += ids.length;
          if (wasKilled) calls++;
        }
        return got;
      };
      const running = Promise.all(Array.from({ length: 8 }, worker));
      for (let i = 0; i < 500 && received < 3000; i++) await sleep(10);
      assert.ok(received >= 3000, "IDs flow before the kill");
      await doomed.kill();
      killed = true;
      const results = await running;
      const all = results.flat().flatMap((r) => r.ids);
      assert.ok(allDistinct(all), "duplicate IDs across the failover");
      const inSurvivor = (id: bigint) => {
        const w = layout.decode(id).worker;
        return w >= survivorRange[0] && w < survivorRange[0] + survivorRange[1];
      };
      assert.ok(all.some((id) => !inSurvivor(id)), "IDs came from the first node before the kill");
      for (const r of results) {
        const tail = r.filter((c) => c.killed);
        assert.equal(tail.length, afterKill);
        // Calls issued after the kill: direct IDs from the survivor (pool IDs may be older).
        assert.ok(tail.every((c) => c.ids.slice(0, 25).every(inSurvivor)));
      }
      const st = client.stats();
      assert.ok(st.failovers >= 1 && st.nodeFailures >= 1, JSON.stringify(st));
    } finally {
      pool.close();
      await client.close();
      await doomed.stop();
      await survivor.stop();
    }
  });

  test("a lease change: RANGE_CHANGED, reconnect, IDs from the new range, none twice", async (t) => {
    const prefix = "ts-lease";
    const node = await NodeProc.start(NODE_ARGS, { store: etcd.store(prefix) });
    const client = new Client([node.addr], { timeoutMs: 2000, backoffMinMs: 100, backoffMaxMs: 400 });
    try {
      const layout: Layout = await client.layout();
      const [key, value] = [...(await etcd.range(`${prefix}/idgen/default/workers/`))][0]!;
      const record = JSON.parse(value) as WorkerRecord;
      assert.equal(record.owner.pid, node.pid);
      const oldFirst = Number(key.split("/").pop());
      const oldRange = [oldFirst, oldFirst + record.count];
      const inOld = (id: bigint) => {
        const w = layout.decode(id).worker;
        return w >= oldRange[0]! && w < oldRange[1]!;
      };
      const all: bigint[] = [];
      const errors: Error[] = [];
      let stolen = false;
      let stop = false;
      const worker = async () => {
        for (let i = 0; i < 100_000 && !stop; i++) {
          try {
            all.push(...(await client.nextIds(10)));
          } catch (e) {
            // While the node holds no lease it answers 300 (retry elsewhere); with one node
            // that reaches the caller, as does the backoff after it. So does a connection
            // reset under a call (a 305 lost to it): a node failure like any other.
            if (!(e instanceof ServerError && e.retryElsewhere) && !(e instanceof UnavailableError)) throw e;
            errors.push(e);
            await sleep(20);
          }
          await sleep(2);
        }
      };
      const running = Promise.all(Array.from({ length: 4 }, worker));
      await sleep(500);
      const before = all.length;
      assert.ok(before > 0 && all.every(inOld));
      // A rival takes the node's worker records with a newer generation, ahead of the clocks:
      // the node's next renewal fails its fence and it takes another range.
      const rival: WorkerRecord = {
        ...record,
        owner: { ...record.owner, node_id: "rival", pid: 1, instance: "rival/1" },
        generation: 1_000_000 + oldFirst,
        lease_end: Date.now() - Number(layout.epochMs) + 4000,
        written_unix_ms: Date.now(),
      };
      await etcd.put(key, JSON.stringify(rival));
      stolen = true;
      const deadline = Date.now() + 20_000;
      while (Date.now() < deadline && !(client.stats().rangeChanges >= 1 && all.slice(before).some((id) => !inOld(id)))) await sleep(50);
      await sleep(300);
      stop = true;
      await running;
      assert.ok(stolen);
      const st = client.stats();
      t.diagnostic(`client stats ${JSON.stringify(st)}; ${errors.length} calls answered 300 or backing off`);
      // The 305 itself may be lost to a reset when a write races the server's close (then
      // the node counts as failed once, and the client reconnects after its backoff).
      assert.ok(st.rangeChanges + st.nodeFailures >= 1, `RANGE_CHANGED or a node failure: ${JSON.stringify(st)}`);
      const newIds = all.slice(before).filter((id) => !inOld(id));
      assert.ok(newIds.length > 0, "IDs from the new range after the change");
      const hello = client.nodes()[0]!.hello!;
      assert.ok(hello.workerFirst >= oldRange[1]! || hello.workerFirst + hello.workerCount <= oldRange[0]!, `new HELLO_OK range ${hello.workerFirst}+${hello.workerCount}`);
      assert.ok(allDistinct(all), "no ID twice over the whole history");
      assert.ok(st.connects >= 2);
    } finally {
      await client.close();
      await node.stop();
    }
  });
});
