/* global console, process, setInterval, clearInterval */
// Counts the source files one user call runs through, by V8's precise coverage: the scenario warms up (so the
// measured call takes its usual path, e.g. a cache hit), then the one call runs under coverage, and every workspace
// file with a function that ran is listed, grouped by package. The figure issue 31 asks for ("files opened to follow
// the call"), measured rather than read.
//   node tools/lab/scripts/walkFiles.mjs tensor|lms|ipc
import 'reflect-metadata';
import { Session } from 'node:inspector/promises';

import { fileURLToPath } from 'node:url';
import { isMainThread, MessageChannel, parentPort, Worker, workerData } from 'node:worker_threads';

import { cpu, createRuntime } from '@stowage/core';
import { ipc, StorageQueue } from '@stowage/ipc';
import { lms, pin } from '@stowage/lms';

/** Files, with the functions that ran in each, while `run` ran. */
async function covered(run) {
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: true });
  await run();
  const { result } = await session.post('Profiler.takePreciseCoverage');
  await session.post('Profiler.stopPreciseCoverage');
  session.disconnect();
  const files = new Map();
  for (const script of result) {
    const match = /\/((?:packages|tools|examples)\/[^/]+)\/dist\/(.*)\.js$/.exec(script.url);
    if (match === null) continue;
    const ran = script.functions.filter((fn) => fn.functionName !== '' && fn.ranges[0].count > 0).map((fn) => fn.functionName);
    if (ran.length > 0) files.set(`${match[1]}/src/${match[2]}.ts`, ran);
  }
  return files;
}

const scenarios = {
  /** `rt.tensor([2, 3])` on a cache hit of the CPU engine. */
  async tensor() {
    const rt = await createRuntime({ plugins: [cpu()] });
    for (let i = 0; i < 3; i++) rt.tensor([2, 3]).storage.release();
    return covered(async () => void rt.tensor([2, 3]));
  },
  /**
   * A send of a shared CPU storage to a worker thread (`StorageQueue#put`) and the producer's release while the
   * consumer still holds it; the consumer thread's get and release are measured there (printed second).
   */
  async ipc() {
    const rt = await createRuntime({ plugins: [cpu({ shared: true }), ipc({ deadCheckIntervalMs: 0 })] });
    const channel = new MessageChannel();
    const worker = new Worker(fileURLToPath(import.meta.url), { workerData: channel.port2, transferList: [channel.port2] });
    const queue = new StorageQueue(rt, channel.port1);
    const warm = rt.storage(1 << 16);
    queue.put(warm);
    warm.release();
    const s = rt.storage(1 << 16);
    const files = await covered(async () => {
      queue.put(s);
      s.release();
    });
    const alive = setInterval(() => {}, 1000); // the queue unrefs its worker; wait for the consumer's figures
    scenarios.consumerFiles = (await new Promise((resolve, reject) => {
      worker.on('message', (m) => m?.files && resolve(m));
      worker.once('error', reject);
    })).files;
    clearInterval(alive);
    queue.close();
    await worker.terminate();
    await rt.dispose();
    return files;
  },
  /** A reclaim (an allocation over the budget pages out the least recent storage) and that storage's page-in. */
  async lms() {
    const rt = await createRuntime({ plugins: [cpu({ limit: '24MiB' }), lms({ policy: 'lru' })] });
    const a = rt.storage(10 << 20);
    const b = rt.storage(10 << 20);
    pin(a, b).release();
    const warm = rt.storage(10 << 20); // warms the reclaim path once
    pin(warm).release();
    pin(a).release();
    pin(b).release();
    return covered(async () => {
      const c = rt.storage(10 << 20); // reclaims warm, the least recent
      pin(c).release();
      pin(warm).release(); // pages it back in (reclaiming another)
    });
  },
};

/** The consumer thread of the ipc scenario: gets each storage and releases it, the second one under coverage. */
async function consumer() {
  const rt = await createRuntime({ plugins: [cpu({ shared: true }), ipc({ deadCheckIntervalMs: 0 })] });
  const queue = new StorageQueue(rt, workerData);
  (await queue.get()).release();
  const files = await covered(async () => (await queue.get()).release());
  parentPort.postMessage({ files: [...files] });
}

if (!isMainThread) {
  await consumer();
} else {
  const name = process.argv[2] ?? 'tensor';
  const files = await scenarios[name]();
  print(name === 'ipc' ? 'the producer: put and release' : name, files);
  if (name === 'ipc') print('the consumer: get and release', new Map(scenarios.consumerFiles));
}

function print(title, files) {
  console.log(`# ${title}`);
  let previous = null;
  for (const [file, functions] of files) {
    const pkg = file.split('/').slice(0, 2).join('/');
    if (pkg !== previous) console.log(pkg);
    previous = pkg;
    console.log(`  ${file.slice(pkg.length + 1)}: ${functions.join(', ')}`);
  }
  console.log(`${files.size} files`);
}
