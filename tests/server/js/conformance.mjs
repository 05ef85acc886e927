// The LangGraph JS SDK against `onward serve` (tests/server/test_js_sdk.py starts the server):
// assistants, cancel stopping effects, enqueue order, join after a dropped stream,
// threads count/copy, stateless runs, the store API, crons, patch state, and a clear
// error for what onward does not do.
import assert from "node:assert/strict";
import { readFileSync, existsSync } from "node:fs";
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.env.ONWARD_URL, apiKey: null });
const workdir = process.env.ONWARD_WORKDIR;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// The labels of the record tool's calls so far. A call's line is written after its file is
// opened: a line not ended yet (or a file still empty) is not a call yet.
const calls = () => {
  if (!existsSync(`${workdir}/calls.jsonl`)) return [];
  const text = readFileSync(`${workdir}/calls.jsonl`, "utf8");
  const ended = text.slice(0, text.lastIndexOf("\n") + 1);
  return ended.split("\n").filter(Boolean).map((l) => JSON.parse(l).label);
};
const chain = (labels, seconds = 0) => ({
  goal: `record ${labels.join(" ")}`,
  plan: {
    steps: labels.map((label, i) => ({
      id: label,
      tool: "record",
      args: seconds ? { label, seconds } : { label },
      ...(i ? { depends_on: [labels[i - 1]] } : {}),
    })),
  },
});
const done = (values) =>
  Object.entries(values?.steps ?? {}).filter(([, r]) => r.status === "done").map(([id]) => id).sort();
const results = [];
async function check(name, fn) {
  await fn();
  results.push(name);
}

await check("assistants", async () => {
  const all = await client.assistants.search();
  assert.deepEqual(all.map((a) => a.name).sort(), ["careful", "onward"]);
  const careful = await client.assistants.get("careful");
  assert.equal(careful.context.policy.approve_all, true);
  const schemas = await client.assistants.getSchemas(careful.assistant_id);
  assert.equal(schemas.graph_id, "onward");
  assert.ok(schemas.input_schema);
  assert.deepEqual(await client.assistants.getSubgraphs(careful.assistant_id), {});
  const graph = await client.assistants.getGraph(careful.assistant_id);
  assert.ok(graph.nodes.some((n) => n.id === "execute"));
  const mine = await client.assistants.create({
    graphId: "onward",
    name: "js",
    context: { policy: { approve_tools: ["record"] } },
  });
  assert.equal(mine.version, 1);
  const two = await client.assistants.update(mine.assistant_id, { context: { budget: { max_steps: 4 } } });
  assert.equal(two.version, 2);
  const versions = await client.assistants.getVersions(mine.assistant_id);
  assert.deepEqual(versions.map((v) => v.version), [2, 1]);
  assert.equal((await client.assistants.setLatest(mine.assistant_id, 1)).version, 1);
  await assert.rejects(
    client.assistants.create({ graphId: "onward", context: { policy: { auto_approve: ["pay"] } } }),
    (e) => e.status === 403,
  );
  const thread = await client.threads.create();
  await client.runs.wait(thread.thread_id, "careful", { input: chain(["careful"]) });
  const [run] = await client.runs.list(thread.thread_id);
  // Stopped at a question: the run ended well, its thread is interrupted (as on LangGraph Server).
  assert.equal(run.status, "success");
  assert.equal((await client.threads.get(thread.thread_id)).status, "interrupted");
  assert.equal(run.assistant_id, careful.assistant_id);
});

await check("cancel stops effects", async () => {
  const thread = await client.threads.create();
  const run = await client.runs.create(thread.thread_id, "onward", { input: chain(["a", "b", "c"], 1.5) });
  while (!calls().includes("a")) await sleep(50);
  await client.runs.cancel(thread.thread_id, run.run_id, true, "interrupt");
  assert.equal((await client.runs.get(thread.thread_id, run.run_id)).status, "interrupted");
  await sleep(2000);
  assert.deepEqual(calls().filter((l) => ["a", "b", "c"].includes(l)), ["a"]);
  await client.runs.cancelMany({ status: "all" }); // nothing left running: a 204
});

await check("enqueue order", async () => {
  const thread = await client.threads.create();
  const tid = thread.thread_id;
  const pause = { interruptAfter: ["verify"] };
  const first = await client.runs.create(tid, "onward", { input: chain(["e1", "e2", "e3"], 1), ...pause });
  const second = await client.runs.create(tid, "onward", { input: null, ...pause });
  const third = await client.runs.create(tid, "onward", { input: null, multitaskStrategy: "enqueue", ...pause });
  assert.equal((await client.runs.get(tid, second.run_id)).status, "pending");
  await assert.rejects(
    client.runs.create(tid, "onward", { input: null, multitaskStrategy: "reject" }),
    (e) => e.status === 409,
  );
  assert.deepEqual(done(await client.runs.join(tid, first.run_id)), ["e1"]);
  assert.deepEqual(done(await client.runs.join(tid, second.run_id)), ["e1", "e2"]);
  assert.deepEqual(done(await client.runs.join(tid, third.run_id)), ["e1", "e2", "e3"]);
});

await check("join after a dropped stream", async () => {
  const thread = await client.threads.create();
  const tid = thread.thread_id;
  const controller = new AbortController();
  let runId;
  const ids = [];
  const stream = client.runs.stream(tid, "onward", {
    input: chain(["j1", "j2"], 0.5),
    streamMode: ["values", "updates"],
    signal: controller.signal,
    onRunCreated: (meta) => { runId = meta.run_id; },
  });
  try {
    for await (const part of stream) {
      ids.push(part.id);
      if (ids.length === 2) controller.abort(); // the page goes away
    }
  } catch (e) {
    assert.equal(e.name, "AbortError");
  }
  assert.ok(runId, "the run id from Content-Location");
  assert.deepEqual(ids.slice(0, 2), ["1", "2"]);
  const rest = [];
  for await (const part of client.runs.joinStream(tid, runId, { lastEventId: "2" })) rest.push(part);
  assert.equal(rest[0].id, "3");
  const values = rest.filter((p) => p.event === "values").at(-1).data;
  assert.deepEqual(done(values), ["j1", "j2"]);
  const threadParts = [];
  for await (const part of client.threads.joinStream(tid)) threadParts.push(part);
  assert.deepEqual(threadParts, []); // nothing in hand on the thread any more: the stream ends
});

await check("threads count copy and pagination", async () => {
  const n = await client.threads.count();
  assert.ok(n >= 4);
  const [one] = await client.threads.search({ limit: 1 });
  const state = await client.threads.getState(one.thread_id);
  assert.ok(state.values);
});

await check("stateless runs, store, crons, patch state", async () => {
  const before = await client.threads.count();
  const values = await client.runs.wait(null, "onward", { input: chain(["s1"]) });
  assert.deepEqual(done(values), ["s1"]);
  const batch = await client.runs.createBatch([
    { assistantId: "onward", input: chain(["s2"]) },
    { assistantId: "onward", input: chain(["s3"]), on_completion: "keep" }, // raw fields, as createBatch sends them
  ]);
  assert.equal(batch.length, 2);
  for (let i = 0; i < 400 && !["s2", "s3"].every((l) => calls().includes(l)); i++) await sleep(50);
  assert.ok(["s2", "s3"].every((l) => calls().includes(l)));
  for (let i = 0; i < 400 && (await client.threads.count()) !== before + 1; i++) await sleep(50);
  assert.equal(await client.threads.count(), before + 1); // only the kept one is left

  await client.store.putItem(["js", "notes"], "n1", { text: "hello", n: 1 });
  await client.store.putItem(["js", "notes"], "n2", { text: "bye", n: 2 });
  assert.deepEqual((await client.store.getItem(["js", "notes"], "n1")).value, { text: "hello", n: 1 });
  const found = await client.store.searchItems(["js"], { filter: { n: 2 } });
  assert.deepEqual(found.items.map((i) => i.key), ["n2"]);
  assert.deepEqual((await client.store.listNamespaces({ prefix: ["js"] })).namespaces, [["js", "notes"]]);
  await client.store.deleteItem(["js", "notes"], "n1");
  assert.equal(await client.store.getItem(["js", "notes"], "n1"), null);
  await assert.rejects(client.store.searchItems(["js"], { query: "semantic" }), (e) => e.status === 422);

  const kept = batch[1].thread_id;
  const cron = await client.crons.createForThread(kept, "onward", { schedule: "0 9 * * *", input: chain(["c1"]) });
  assert.equal(cron.thread_id, kept);
  const stateless = await client.crons.create("onward", { schedule: "*/5 * * * *", input: chain(["c2"]) });
  assert.equal(stateless.on_run_completed, "delete");
  assert.equal(await client.crons.count({ threadId: kept }), 1);
  assert.deepEqual((await client.crons.search({ threadId: kept })).map((c) => c.cron_id), [cron.cron_id]);
  const off = await client.crons.update(stateless.cron_id, { enabled: false });
  assert.equal(off.enabled, false);
  await client.crons.delete(stateless.cron_id);
  await client.crons.delete(cron.cron_id);
  assert.equal(await client.crons.count(), 0);
  await assert.rejects(client.crons.create("onward", { schedule: "* * * * * *" }), (e) => e.status === 422);

  await client.threads.patchState(kept, { reviewed: "yes" });
  const state = await client.threads.getState(kept);
  assert.equal(state.metadata.reviewed, "yes");
  assert.deepEqual(done(state.values), ["s3"]);
  await assert.rejects(client.threads.patchState(kept, { source: "x" }), (e) => e.status === 403);
});

await check("unsupported is a clear error", async () => {
  const thread = await client.threads.create();
  await assert.rejects(
    client.runs.wait(thread.thread_id, "onward", { input: chain(["w"]), webhook: "http://127.0.0.1:9/x" }),
    (e) => e.status === 422,
  );
});

console.log(JSON.stringify({ passed: results }));
