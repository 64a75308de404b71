// BullMQ's side of the end-to-end comparison; runs with the machine's Node.js and the bullmq
// package installed in benchmarks/.peers/node (NODE_PATH points there).
//
//   node bullmq_bench.mjs worker REDIS_URL QUEUE CONCURRENCY   # prints "ready", works until killed
//   node bullmq_bench.mjs run REDIS_URL QUEUE JOBS             # enqueue, wait for all; prints seconds
//
// Jobs carry a priority (1-3, BullMQ's prioritized set), are added in chunks with addBulk (one
// round trip per chunk) and are no-ops; completed jobs are kept, as by default.
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH + "/");
const { Queue, Worker } = require("bullmq");

const CHUNK = 100;
const [mode, url, name, arg] = process.argv.slice(2);
const parsed = new URL(url);
const connection = { host: parsed.hostname, port: Number(parsed.port), maxRetriesPerRequest: null };

if (mode === "worker") {
  const worker = new Worker(name, async () => {}, { connection, concurrency: Number(arg) });
  await worker.waitUntilReady();
  console.log("ready");
  process.on("SIGTERM", async () => { await worker.close(); process.exit(0); });
} else if (mode === "run") {
  const jobs = Number(arg);
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  const started = process.hrtime.bigint();
  for (let first = 0; first < jobs; first += CHUNK) {
    const chunk = [];
    for (let i = first; i < Math.min(jobs, first + CHUNK); i++) {
      chunk.push({ name: "noop", data: {}, opts: { priority: 1 + (i % 3) } });
    }
    await queue.addBulk(chunk);
  }
  while ((await queue.getCompletedCount()) < jobs) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  console.log((Number(process.hrtime.bigint() - started) / 1e9).toFixed(6));
  await queue.close();
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
