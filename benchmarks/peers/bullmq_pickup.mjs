// BullMQ's side of the idle-pickup comparison; runs with the machine's Node.js and the bullmq
// package installed in benchmarks/.peers/node (NODE_PATH points there).
//
//   node bullmq_pickup.mjs worker REDIS_URL QUEUE CONCURRENCY   # prints "ready", works until killed;
//                                                                # each job pushes its pickup (ms) to QUEUE:pickup
//   node bullmq_pickup.mjs add REDIS_URL QUEUE                   # one prioritized job stamped with now (ms)
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH + "/");
const { Queue, Worker } = require("bullmq");
const IORedis = require("ioredis");

const [mode, url, name, arg] = process.argv.slice(2);
const parsed = new URL(url);
const connection = { host: parsed.hostname, port: Number(parsed.port), maxRetriesPerRequest: null };

if (mode === "worker") {
  const results = new IORedis(connection);
  const worker = new Worker(name, async (job) => {
    await results.rpush(`${name}:pickup`, String(Date.now() - job.data.t));
  }, { connection, concurrency: Number(arg) });
  await worker.waitUntilReady();
  console.log("ready");
  process.on("SIGTERM", async () => { await worker.close(); results.disconnect(); process.exit(0); });
} else if (mode === "add") {
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  await queue.add("noop", { t: Date.now() }, { priority: 1 });
  await queue.close();
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
