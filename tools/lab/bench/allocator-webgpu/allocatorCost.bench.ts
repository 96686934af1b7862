// The allocators' own cost per operation (STYLE.md §11), without a GPU driver: the WebGPU bench's replay of Stowage's
// allocator and TensorFlow.js's BufferManager, each over a stand-in GPUDevice (StandInDevice.ts) whose createBuffer
// and submit do nothing, so what is timed is the allocators' JavaScript alone. `pnpm bench:webgpu` times the same
// replay on Dawn, where the driver's submits and buffer creation add noise larger than the allocators' difference.
//
// Each (trace, allocator) run is a fresh Node process, as a program's first steps are: V8 starts cold, and no
// allocator runs in code another one's run warmed up or deoptimized (the WebGPU package's README, "warm pass").
// Passes 1, 2, … are the same plan replayed on one allocator instance, so pass 1 includes the JIT's warm-up. Each
// run is repeated and the median taken. Node flags go to the children with --node-flag, e.g. --node-flag=--no-opt
// to compare the interpreted code (the first calls of every program).
//
//   pass lines   {"allocator","trace","pass","ops","nsPerOp","nsPerOpRuns","mainThreadCpuMsMedian"?}
//   summary      {"scenario":"summary","trace","nsPerOpRatio":[pass 1, pass 2, …]}   Stowage's ns/op over tfjs's
//
// The child's own command line (internal): --child --allocator <name> --child-trace <exact name> --passes <n>; it prints
// one JSON line {pass, ops, seconds, mainThreadCpuMs?} per pass.
import 'reflect-metadata'; // an application entry point: first, before tsyringe loads (STYLE.md §5)
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { findTraceRoot, listTraces, readTraceFile } from '@stowage/lab/replay';
import { allocatorNames, BenchReporter, BenchUsageError, parseBenchFlags, runBench, selectByName } from '@stowage/lab/bench-kit';
import type { ReplayAllocatorKind } from './ReplayAllocator.js';
import { replayAllocatorKinds } from './replayAllocatorKinds.js';
import { replayPass } from './replayPass.js';
import { compileReplayPlan } from './ReplayPlan.js';
import { RssSampler } from './RssSampler.js';
import { selectTraces } from './selectTraces.js';
import { standInContext } from './StandInDevice.js';

/** The WebGPU bench's scaling: each trace's peak live bytes at most 512 MiB. */
const MAX_PEAK_LIVE_BYTES = 512 * 2 ** 20;
/** No replay stops for its size: the stand-in device holds no memory. */
const STOP_RESERVED_BYTES = Number.MAX_SAFE_INTEGER;
/** Resident memory means nothing here: sampled once per pass (a power of two larger than any plan). */
const RSS_EVERY_OPS = 2 ** 30;

const USAGE = `Usage: node tools/lab/dist-bench/allocator-webgpu/allocatorCost.bench.js [--trace <substring>] [--all] [--allocator <names>] [--passes <n>] [--repeats <n>] [--node-flag <flag>]…
  --trace <substring>   replay only traces whose name contains <substring> (searched among all traces)
  --all                 replay every trace (default: the WebGPU bench's six)
  --allocator <names>   stowage, tfjs (comma-separated; default both)
  --passes <n>          replays of the plan on one allocator instance, in one process (default 3)
  --repeats <n>         processes per (trace, allocator); each figure is their median (default 3)
  --node-flag <flag>    a Node flag for the child processes, e.g. --node-flag=--no-opt (repeatable)
JSON lines go to stdout; a progress bar goes to stderr when it is a terminal.`;

interface ChildPass {
  readonly pass: number;
  readonly ops: number;
  readonly seconds: number;
  readonly mainThreadCpuMs?: number;
}

async function main(): Promise<void> {
  const v = parseBenchFlags(
    process.argv.slice(2),
    {
      trace: { type: 'string' },
      all: { type: 'boolean' },
      allocator: { type: 'string', multiple: true },
      passes: { type: 'string' },
      repeats: { type: 'string' },
      'node-flag': { type: 'string', multiple: true },
      child: { type: 'boolean' },
      'child-trace': { type: 'string' },
    },
    USAGE,
  );
  if (v.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const passes = positiveInteger(v.passes, 3, '--passes');
  const kinds = selectByName(
    replayAllocatorKinds().filter((k) => k.steady),
    allocatorNames(v.allocator),
  );
  if (v.child === true) return runChild(kinds, v['child-trace'], passes);

  const repeats = positiveInteger(v.repeats, 3, '--repeats');
  const nodeFlags = v['node-flag'] ?? [];
  const root = findTraceRoot();
  if (root === undefined) throw new BenchUsageError('No trace directory found (shared/traces above the working directory, or $STOWAGE_TRACES).');
  const traces = selectTraces(listTraces(root), { trace: v.trace, all: v.all ?? false });
  if (traces.length === 0) throw new BenchUsageError(`No trace under ${root} matches${v.trace === undefined ? ' the default set' : ` "${v.trace}"`}.`);

  const reporter = new BenchReporter('webgpu allocator cost', traces.length * kinds.length * repeats);
  try {
    reporter.emit({ scenario: 'environment', node: process.version, nodeFlags, passes, repeats, device: 'stand-in (no driver)', date: new Date().toISOString() });
    for (const trace of traces) {
      const nsPerOp = new Map<string, number[]>();
      for (const kind of kinds) {
        const runs: ChildPass[][] = [];
        for (let r = 0; r < repeats; r++) {
          reporter.task(`${trace.name}: ${kind.name} ${r + 1}/${repeats}`);
          runs.push(spawnChild(nodeFlags, kind.name, trace.name, passes));
          reporter.step();
        }
        const perPass: number[] = [];
        for (let p = 0; p < passes; p++) {
          const ofPass = runs.map((run) => run[p]!);
          const ns = ofPass.map((c) => Math.round((c.seconds * 1e9) / c.ops));
          const cpu = ofPass.flatMap((c) => (c.mainThreadCpuMs === undefined ? [] : [c.mainThreadCpuMs]));
          perPass.push(median(ns));
          reporter.emit({
            allocator: kind.name,
            trace: trace.name,
            pass: p + 1,
            ops: ofPass[0]!.ops,
            nsPerOp: median(ns),
            nsPerOpRuns: ns,
            ...(cpu.length === runs.length ? { mainThreadCpuMsMedian: median(cpu) } : {}),
          });
        }
        nsPerOp.set(kind.name, perPass);
      }
      const stowage = nsPerOp.get('stowage');
      const tfjs = nsPerOp.get('tfjs');
      if (stowage !== undefined && tfjs !== undefined) {
        reporter.emit({ scenario: 'summary', trace: trace.name, nsPerOpRatio: stowage.map((ns, p) => Math.round((ns / tfjs[p]!) * 1000) / 1000) });
      }
    }
  } finally {
    reporter.stop();
  }
}

/** What starts a child's pass line on its stdout, so that output of V8 flags is never read as one. */
const PASS_PREFIX = 'stowage-pass ';

/** One (allocator, trace) run in a fresh Node process; its pass lines. */
function spawnChild(nodeFlags: readonly string[], allocator: string, trace: string, passes: number): ChildPass[] {
  const script = fileURLToPath(import.meta.url);
  const args = [...nodeFlags, script, '--child', '--allocator', allocator, '--child-trace', trace, '--passes', String(passes)];
  const child = spawnSync(process.execPath, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (child.error) throw child.error;
  if (child.status !== 0) throw new Error(`The ${allocator} run on ${trace} exited with ${child.status ?? child.signal}: node ${args.join(' ')}`);
  // V8 flags such as --trace-gc print to stdout too: pass lines carry a prefix, the rest goes to stderr.
  const lines: ChildPass[] = [];
  for (const line of child.stdout.split('\n')) {
    if (!line.startsWith(PASS_PREFIX)) {
      if (line !== '') process.stderr.write(`${line}\n`);
      continue;
    }
    try {
      lines.push(JSON.parse(line.slice(PASS_PREFIX.length)) as ChildPass);
    } catch (error) {
      throw new Error(`The ${allocator} run on ${trace} printed a pass line that is not JSON (${String(error)}): ${line}`);
    }
  }
  if (lines.length !== passes) throw new Error(`The ${allocator} run on ${trace} printed ${lines.length} passes, not ${passes}.`);
  return lines;
}

/** The child: replays the trace `passes` times on one instance of the one allocator kind over a stand-in device. */
async function runChild(kinds: readonly ReplayAllocatorKind[], traceName: string | undefined, passes: number): Promise<void> {
  const [kind] = kinds;
  if (kind === undefined || kinds.length !== 1) throw new BenchUsageError('--child needs --allocator with one name.');
  const root = findTraceRoot();
  const trace = root === undefined ? undefined : listTraces(root).find((t) => t.name === traceName);
  if (trace === undefined) throw new BenchUsageError(`--child-trace ${traceName ?? '(missing)'} names no trace.`);
  const plan = compileReplayPlan(await readTraceFile(trace), MAX_PEAK_LIVE_BYTES, 1);
  const allocator = kind.create(standInContext());
  const rss = new RssSampler();
  rss.setBaseline();
  try {
    for (let pass = 1; pass <= passes; pass++) {
      const run = replayPass(allocator, plan, { submitEveryFrees: 1, stopReservedBytes: STOP_RESERVED_BYTES, rssEveryOps: RSS_EVERY_OPS, rss });
      if (run.failed !== undefined) throw new Error(run.failed);
      const line: ChildPass = { pass, ops: run.ops, seconds: run.seconds, ...(run.cpu.mainThreadCpuMs === undefined ? {} : { mainThreadCpuMs: run.cpu.mainThreadCpuMs }) };
      process.stdout.write(`${PASS_PREFIX}${JSON.stringify(line)}\n`);
    }
  } finally {
    allocator.dispose();
  }
}

function positiveInteger(value: string | undefined, fallback: number, flag: string): number {
  const n = Number(value ?? fallback);
  if (!Number.isSafeInteger(n) || n < 1) throw new BenchUsageError(`${flag} needs a positive integer.\n${USAGE}`);
  return n;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : Math.round((sorted[mid - 1]! + sorted[mid]!) / 2);
}

runBench(main);
