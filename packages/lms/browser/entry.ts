// Applications import reflect-metadata first (STYLE.md §5): tsyringe in core needs it before it loads.
import 'reflect-metadata';
import type { Runtime, StorageImpl } from '@stowage/core';
import { createRuntime, formatBytes, resolve } from '@stowage/core';
import { openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import { LmsController, lms, StorageResidency, PageInPendingError, pin, pinAsync, SPECULATION_STAT_KEYS } from '@stowage/lms';
import { ALLOC_SOURCES } from '@stowage/lms/testing';
import type { LmsBrowserCheckReport, LmsCheckId, LmsCheckResult } from './LmsBrowserCheckReport.js';
import { patternBytes } from '@stowage/core/testing';

/**
 * The entry of the LMS browser bundle (dist-browser/stowage-lms-checks.js, built by
 * test/browser/LmsBrowserChecks.test.ts with `buildBrowserBundle` from `@stowage/lab/browser`). It
 * imports the packages through their exports maps (the tsc output in dist/), and defines
 * `window.runStowageLmsBrowserChecks()`, which the test calls in headless Chromium:
 * - asks `navigator.gpu` for an adapter; without one it reports why and runs nothing;
 * - opens a device with `openWebGpuDevice()` (the browser path: `navigator.gpu`);
 * - runs each check (LmsCheckId in LmsBrowserCheckReport.d.ts) in a runtime of its own,
 *   `createRuntime({ plugins: [webgpu({ device, limit, pagingReserve }), lms()] })` under a 28 MiB budget (16 MiB
 *   of segments, 12 MiB kept for page-out staging), recording each
 *   outcome and going on after a failure;
 * - destroys the device and resolves to a JSON report.
 */

declare global {
  interface Window {
    runStowageLmsBrowserChecks(): Promise<LmsBrowserCheckReport>;
  }
}

const MiB = 1 << 20;
/**
 * The device's budget covers segments and page-out staging (Note [One budget] in @stowage/allocator-webgpu):
 * PAGING_RESERVE_BYTES are kept for the staging of page-outs in flight (the checks make and page out storages in
 * synchronous runs, before any copy lands: `checkBudget` makes up to 11 MiB between two `pinAsync` calls, and ran
 * out of memory with 8 MiB kept), and segments get the other SEGMENT_BUDGET_BYTES (the 16 MiB these checks had
 * before staging counted), which a few storages of a few MiB each exceed.
 */
const SEGMENT_BUDGET_BYTES = 16 * MiB;
const PAGING_RESERVE_BYTES = 12 * MiB;
/** The WebGPU allocator's limit in every check. */
const BUDGET_BYTES = SEGMENT_BUDGET_BYTES + PAGING_RESERVE_BYTES;

/** Records what a check saw; a condition that does not hold fails the check, and the check goes on. */
interface CheckLog {
  /** Records `line`, prefixed 'FAILED: ' when `holds` is false (which fails the check). */
  expect(holds: boolean, line: string): void;
  /** Records a measurement. */
  note(line: string): void;
}

type Check = (device: GPUDevice, log: CheckLog) => Promise<void>;

const CHECKS: readonly (readonly [LmsCheckId, Check])[] = [
  ['round-trip', checkRoundTrip],
  ['pin-pending', checkPinPending],
  ['budget', checkBudget],
  ['statistics', checkStatistics],
  ['speculation', checkSpeculation],
];

async function runStowageLmsBrowserChecks(): Promise<LmsBrowserCheckReport> {
  const started = performance.now();
  const userAgent = navigator.userAgent;
  const elapsed = () => Math.round(performance.now() - started);
  const none = { userAgent, adapter: null, budgetBytes: BUDGET_BYTES, checks: [] };
  // @webgpu/types declares navigator.gpu as always there; a browser without WebGPU leaves it undefined.
  const gpu = navigator.gpu as GPU | undefined;
  if (!gpu) {
    const unavailable = `navigator.gpu is undefined (secure context: ${String(isSecureContext)}); Chromium needs --enable-unsafe-webgpu.`;
    return { ...none, unavailable, elapsedMs: elapsed() };
  }
  const adapter = await gpu.requestAdapter();
  if (!adapter) return { ...none, unavailable: 'navigator.gpu.requestAdapter() returned no adapter.', elapsedMs: elapsed() };
  const info = adapter.info as GPUAdapterInfo & { isFallbackAdapter?: boolean };
  const described = `${info.vendor} ${info.architecture} (fallback: ${String(info.isFallbackAdapter)})`;

  const context = await openWebGpuDevice();
  try {
    const checks: LmsCheckResult[] = [];
    for (const [id, check] of CHECKS) checks.push(await runCheck(id, check, context.device));
    return { userAgent, adapter: described, budgetBytes: BUDGET_BYTES, checks, elapsedMs: elapsed() };
  } finally {
    context.device.destroy();
  }
}

async function runCheck(id: LmsCheckId, check: Check, device: GPUDevice): Promise<LmsCheckResult> {
  const started = performance.now();
  const details: string[] = [];
  let ok = true;
  const log: CheckLog = {
    expect(holds, line) {
      if (!holds) ok = false;
      details.push(holds ? line : `FAILED: ${line}`);
    },
    note: (line) => details.push(line),
  };
  try {
    await check(device, log);
    return { id, ok, details, elapsedMs: Math.round(performance.now() - started) };
  } catch (error) {
    return { id, ok: false, details, error: describeError(error), elapsedMs: Math.round(performance.now() - started) };
  }
}

/**
 * Storages of 1 to 5 MiB (some of odd lengths), 22 MiB in all, are made, written and unpinned past the 16 MiB the
 * budget leaves to segments, so that making the later ones reclaims earlier ones. Each then comes back through `await pinAsync`
 * (which may reclaim others, whose page-outs the later `pinAsync` calls wait for) and reads back every byte.
 */
async function checkRoundTrip(device: GPUDevice, log: CheckLog): Promise<void> {
  await using rt = await lmsRuntime(device);
  const sizes = [3 * MiB, 3 * MiB + 13, MiB + 1, 3 * MiB, 2 * MiB, 3 * MiB, 5 * MiB - 3, 2 * MiB];
  const storages = sizes.map((bytes, seed) => inactiveStorage(rt, bytes, seed));
  const reclaimed = countReclaimed(storages);
  log.expect(reclaimed > 0, `${reclaimed} of ${storages.length} storages (${formatBytes(sum(sizes))}) reclaimed once all were made`);
  const mismatches: string[] = [];
  for (const [seed, storage] of storages.entries()) {
    using _guard = await pinAsync(storage);
    const difference = firstDifference(await rt.read(storage), patternBytes(storage.byteLength, seed));
    if (difference !== undefined) mismatches.push(`storage ${seed} (${storage.byteLength} bytes): ${difference}`);
  }
  log.expect(mismatches.length === 0, mismatches.length === 0 ? 'every storage read back every byte after pinAsync' : mismatches.join('; '));
}

/**
 * Makes storages until one is reclaimed; with no await since, its page-out (a copy to a staging buffer that maps
 * asynchronously) is still in flight, so a synchronous `pin()` must refuse it and change nothing.
 */
async function checkPinPending(device: GPUDevice, log: CheckLog): Promise<void> {
  await using rt = await lmsRuntime(device);
  const storages: StorageImpl[] = [];
  let victim: StorageImpl | undefined;
  while (victim === undefined && storages.length < 16) {
    storages.push(inactiveStorage(rt, 3 * MiB, storages.length));
    victim = storages.find((s) => s.lms?.state === 'reclaimed');
  }
  if (victim === undefined) return log.expect(false, `no storage was reclaimed after making ${storages.length} of 3 MiB`);
  const seed = storages.indexOf(victim);
  let thrown: unknown;
  try {
    pin(victim).release();
  } catch (error) {
    thrown = error;
  }
  log.expect(thrown instanceof PageInPendingError, `pin() of storage ${seed} while its page-out is in flight: ${thrown === undefined ? 'did not throw' : describeError(thrown)}`);
  log.expect((thrown as { code?: unknown } | undefined)?.code === 'PAGE_IN_PENDING', `the error's code is ${String((thrown as { code?: unknown } | undefined)?.code)}`);
  log.expect(victim.lms?.state === 'reclaimed', `storage ${seed} is ${victim.lms?.state} after the refused pin`);
  using _guard = await pinAsync(victim);
  log.expect(victim.lms?.state === 'active', `storage ${seed} is ${victim.lms?.state} after await pinAsync`);
  const difference = firstDifference(await rt.read(victim), patternBytes(victim.byteLength, seed));
  log.expect(difference === undefined, `storage ${seed} read back after pinAsync: ${difference ?? 'every byte matched'}`);
}

/**
 * A mixed workload of 40 steps under the budget: each makes a storage of 0.5 to 5 MiB (unpinned once written),
 * every third pins an older one back with `pinAsync`, every fifth releases the oldest. Reserved bytes are sampled
 * after every step.
 */
async function checkBudget(device: GPUDevice, log: CheckLog): Promise<void> {
  await using rt = await lmsRuntime(device);
  const sizes = [MiB + 7, 3 * MiB, MiB / 2, 5 * MiB, 2 * MiB - 1, 4 * MiB];
  const live: StorageImpl[] = [];
  let maxReservedBytes = 0;
  const sample = () => {
    maxReservedBytes = Math.max(maxReservedBytes, statsOf(rt)['reserved_bytes.all.current'] ?? Infinity);
  };
  for (let step = 0; step < 40; step++) {
    live.push(inactiveStorage(rt, sizes[step % sizes.length]!, step));
    sample();
    if (step % 3 === 2) {
      (await pinAsync(live[Math.floor(live.length / 2)]!)).release();
      sample();
    }
    if (step % 5 === 4) {
      live.shift()!.release();
      sample();
    }
  }
  const stats = statsOf(rt);
  const peakBytes = stats['reserved_bytes.all.peak'] ?? Infinity;
  log.expect(maxReservedBytes <= BUDGET_BYTES, `reserved bytes after every step at most ${formatBytes(maxReservedBytes)} (budget ${formatBytes(BUDGET_BYTES)})`);
  log.expect(peakBytes <= BUDGET_BYTES, `reserved_bytes.all.peak ${formatBytes(peakBytes)}`);
  log.expect((stats.reclaimed ?? 0) > 0, `${stats.reclaimed} reclaims on the way`);
}

/** The keys LMS adds to `memoryStats()` (IBM LMS's, plus page-in/out counts and bytes, the wait time and speculation's). */
const LMS_STAT_KEYS = [
  'pinned.all.current',
  'pinned.all.peak',
  'pinned.all.allocated',
  'pinned.all.freed',
  'pinned_bytes.all.current',
  'pinned_bytes.all.peak',
  'pinned_bytes.all.allocated',
  'pinned_bytes.all.freed',
  'reclaimed',
  'reclaimed_bytes',
  'host_bytes.all.current',
  'host_bytes.all.peak',
  'page_out',
  'page_out_bytes',
  'page_in',
  'page_in_bytes',
  'transfer_wait_ms',
  ...SPECULATION_STAT_KEYS,
  ...ALLOC_SOURCES.map((source) => `alloc_distribution.${source}`),
];

/** Reclaims storages by making more than the budget holds, brings them all back, and reads `memoryStats()`. */
async function checkStatistics(device: GPUDevice, log: CheckLog): Promise<void> {
  await using rt = await lmsRuntime(device);
  const storages = Array.from({ length: 8 }, (_, seed) => inactiveStorage(rt, 3 * MiB, seed));
  for (const storage of storages) (await pinAsync(storage)).release();
  const stats = statsOf(rt);
  const missing = LMS_STAT_KEYS.filter((key) => typeof stats[key] !== 'number');
  log.expect(missing.length === 0, missing.length === 0 ? `all ${LMS_STAT_KEYS.length} LMS keys present` : `missing keys: ${missing.join(', ')}`);
  log.expect((stats.page_out ?? 0) > 0, `page_out ${stats.page_out} (${formatBytes(stats.page_out_bytes ?? 0)})`);
  log.expect((stats.page_in ?? 0) > 0, `page_in ${stats.page_in} (${formatBytes(stats.page_in_bytes ?? 0)})`);
  log.note(`reclaimed ${stats.reclaimed}, transfer_wait_ms ${Math.round(stats.transfer_wait_ms ?? 0)}, reclaim_one ${stats['alloc_distribution.reclaim_one']}`);
}

/**
 * Six storages of 3 MiB, one segment each, of which five fit the budget; each iteration pins each in turn, writes
 * it and waits for the queue (an operation's GPU work), then marks the iteration's end. From the fourth iteration
 * on (the first is learned; the next two are predicted from iterations whose prefetches still changed what was
 * reclaimed), reclaims find speculative page-outs and every prefetch is pinned; at the end every storage reads
 * back its last write.
 */
async function checkSpeculation(device: GPUDevice, log: CheckLog): Promise<void> {
  await using rt = await createRuntime({
    plugins: [webgpu({ device, limit: BUDGET_BYTES, pagingReserve: PAGING_RESERVE_BYTES, segmentSize: (rounded: number) => rounded }), lms({ policy: 'speculative', speculation: true })],
  });
  const bytes = 3 * MiB;
  const storages = Array.from({ length: 6 }, (_, seed) => inactiveStorage(rt, bytes, seed));
  const controller = resolve(rt.container, LmsController);
  controller.endIteration();
  const counts: Partial<Record<string, number>>[] = [];
  const iterations = 6;
  for (let iteration = 0; iteration < iterations; iteration++) {
    for (const [k, storage] of storages.entries()) {
      {
        using _op = await pinAsync(storage);
        rt.write(storage, patternBytes(bytes, 10 * iteration + k));
        await device.queue.onSubmittedWorkDone();
      }
      await hostCopiesSettled(storages);
    }
    controller.endIteration();
    counts.push({ ...statsOf(rt) });
  }
  // When a page-out's bytes reach the host (mapAsync) varies with the machine's load, and a prefetch needs them: an
  // operation that started before they arrived decided otherwise, and the learned iteration no longer repeated (this
  // check failed one run in two on a loaded machine). The loop lets every copy in flight land after each operation
  // (a program that waits for its transfers), so that each iteration decides as the last did. Recall is noted.
  const total = (key: string): number => (counts[iterations - 1]![key] ?? 0) - (counts[2]![key] ?? 0);
  const hits = total('speculative_hits');
  const misses = total('speculative_misses');
  log.expect(hits > 0, `iterations 4 to ${iterations}: ${total('speculative_page_out')} speculative page-outs, ${hits} reclaims found one, ${misses} copied (recall ${(hits / Math.max(1, hits + misses)).toFixed(2)})`);
  const prefetched = total('prefetch');
  log.expect(prefetched > 0 && total('prefetch_hits') === prefetched, `iterations 4 to ${iterations}: ${prefetched} prefetches, ${total('prefetch_hits')} pinned`);
  const mismatches: string[] = [];
  for (const [k, storage] of storages.entries()) {
    const difference = firstDifference(await rt.read(storage), patternBytes(bytes, 10 * (iterations - 1) + k));
    if (difference !== undefined) mismatches.push(`storage ${k}: ${difference}`);
  }
  log.expect(mismatches.length === 0, mismatches.length === 0 ? 'every storage read back its last write' : mismatches.join('; '));
  log.expect((statsOf(rt)['reserved_bytes.all.peak'] ?? Infinity) <= BUDGET_BYTES, `reserved_bytes.all.peak ${formatBytes(statsOf(rt)['reserved_bytes.all.peak'] ?? 0)}`);
}

/** A runtime whose WebGPU allocator has the check budget, under LMS. */
function lmsRuntime(device: GPUDevice): Promise<Runtime> {
  return createRuntime({ plugins: [webgpu({ device, limit: BUDGET_BYTES, pagingReserve: PAGING_RESERVE_BYTES }), lms()] });
}

/** A WebGPU storage of `bytes` holding `patternBytes(bytes, seed)`, pinned once and unpinned (so it is inactive). */
function inactiveStorage(rt: Runtime, bytes: number, seed: number): StorageImpl {
  const storage = rt.storage(bytes, { device: 'webgpu' });
  rt.write(storage, patternBytes(bytes, seed));
  pin(storage).release();
  return storage;
}

/** Resolves once no storage's host copy is still on its way (a page-out or speculative page-out mapping). */
async function hostCopiesSettled(storages: readonly StorageImpl[]): Promise<void> {
  const inFlight = (): boolean => storages.some((s) => s.lms instanceof StorageResidency && s.lms.hasHostCopy && !s.lms.hostCopyReady);
  while (inFlight()) await new Promise((resolve) => setTimeout(resolve, 1));
}

function statsOf(rt: Runtime): Partial<Record<string, number>> {
  return rt.allocator('webgpu').memoryStats() as unknown as Partial<Record<string, number>>;
}

function countReclaimed(storages: readonly StorageImpl[]): number {
  return storages.filter((s) => s.lms?.state === 'reclaimed').length;
}

function sum(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

/** Undefined when equal; otherwise where and how the bytes differ. */
function firstDifference(actual: Uint8Array, expected: Uint8Array): string | undefined {
  if (actual.byteLength !== expected.byteLength) return `read ${actual.byteLength} bytes, expected ${expected.byteLength}`;
  const i = actual.findIndex((b, j) => b !== expected[j]);
  return i === -1 ? undefined : `byte ${i} is ${actual[i]}, expected ${expected[i]}`;
}

/** `name: message`, then the cause's, so that a failure reads in one line in the Node test's output. */
function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const text = `${error.name}: ${error.message}`;
  return error.cause === undefined ? text : `${text} (cause: ${describeError(error.cause)})`;
}

window.runStowageLmsBrowserChecks = runStowageLmsBrowserChecks;
