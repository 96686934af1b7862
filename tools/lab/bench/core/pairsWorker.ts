// Runs the pairs scenario for one allocator, named in workerData, in its own worker thread (see
// runPairsInWorker): a fresh isolate, so the loop's call sites see one allocator class only.
import { parentPort, workerData } from 'node:worker_threads';
import { benchAllocators } from './benchAllocators.js';
import { runPairsScenario } from './pairsScenario.js';

const name = (workerData as { allocator: string }).allocator;
const allocator = benchAllocators().find((a) => a.name === name);
if (allocator === undefined) throw new Error(`pairsWorker: no bench allocator named ${name}`);
parentPort!.postMessage(runPairsScenario(allocator));
