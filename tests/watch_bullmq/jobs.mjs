// A real BullMQ producer and worker for tests/test_watch_bullmq.py; runs with the machine's Node.js
// and the bullmq package benchmarks/peers.py installs into benchmarks/.peers/node (NODE_PATH).
//
//   node jobs.mjs worker REDIS_URL QUEUE                        # prints "ready", works until SIGTERM
//   node jobs.mjs add REDIS_URL QUEUE JOBS EVERY_MS TENANTS PRIORITIES [fail]
//   node jobs.mjs pause|resume REDIS_URL QUEUE                  # queue.pause(), queue.resume()
//
// ``add`` adds JOBS jobs whose data is {tenant, n}, tenants and priorities (0: none, so the wait
// list) taken in turn from their comma-separated lists: every EVERY_MS ms one at a time, or with
// EVERY_MS 0 in addBulk chunks of 100; with ``fail``, jobs the worker throws on (one attempt, so
// BullMQ moves them to the failed set). Completed and failed jobs are kept, as by BullMQ's default.
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH + "/");
const { Queue, Worker } = require("bullmq");

const CHUNK = 100;
const [mode, url, name, ...rest] = process.argv.slice(2);
const parsed = new URL(url);
const connection = { host: parsed.hostname, port: Number(parsed.port), maxRetriesPerRequest: null };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

if (mode === "worker") {
  // A job of fairctl loadgen sleeps its data.service_s seconds (docs/watching.md's processor); others 20 ms.
  const work = async (job) => {
    await sleep(job.data.service_s === undefined ? 20 : job.data.service_s * 1000);
    if (job.data.fail) throw new Error("failed on purpose");
  };
  const worker = new Worker(name, work, { connection, concurrency: 2 });
  await worker.waitUntilReady();
  console.log("ready");
  process.on("SIGTERM", async () => { await worker.close(); process.exit(0); });
} else if (mode === "add") {
  const [jobs, every, tenants, priorities, fail] = [Number(rest[0]), Number(rest[1]), rest[2].split(","),
    rest[3].split(",").map(Number), rest[4] === "fail"];
  const queue = new Queue(name, { connection });
  const job = (n) => ({ name: "work", data: { tenant: tenants[n % tenants.length], n, ...(fail ? { fail } : {}) },
    opts: priorities[n % priorities.length] ? { priority: priorities[n % priorities.length] } : {} });
  for (let first = 0; first < jobs; first += every ? 1 : CHUNK) {
    if (every) {
      const { name: jobName, data, opts } = job(first);
      await queue.add(jobName, data, opts);
      await sleep(every);
    } else {
      await queue.addBulk(Array.from({ length: Math.min(CHUNK, jobs - first) }, (_, i) => job(first + i)));
    }
  }
  await queue.close();
} else if (mode === "pause" || mode === "resume") {
  const queue = new Queue(name, { connection });
  await (mode === "pause" ? queue.pause() : queue.resume());
  await queue.close();
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
