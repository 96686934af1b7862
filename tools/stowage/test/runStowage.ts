import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { findTraceRoot } from '@stowage/lab/replay';
import type { TraceEvent } from '@stowage/lab/replay';
import { RMM_CSV_HEADER } from '@stowage/core/plugin-kit';
import { formatTraceLines } from '@stowage/snapshot-pickle';

/** The built command, as pnpm links it: bin/stowage.js (the package root is one level above dist-test/). */
export const BIN = fileURLToPath(new URL('../bin/stowage.js', import.meta.url));

/** What one run of the command gave. */
export interface StowageRun {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `node bin/stowage.js ...args` and waits for it; stdout and stderr are pipes (no terminal, so no bar). */
export function runStowage(args: readonly string[], options: { cwd?: string; timeoutMs?: number; input?: string | Uint8Array } = {}): StowageRun {
  const run = spawnSync(process.execPath, [BIN, ...args], {
    cwd: options.cwd ?? process.cwd(),
    encoding: 'utf8',
    timeout: options.timeoutMs ?? 60_000,
    ...(options.input === undefined ? {} : { input: options.input }),
  });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** Asserts a run failed with `status`, said `pattern` on stderr, and printed no stack trace. */
export function expectCleanFailure(run: StowageRun, status: number, pattern: RegExp): void {
  expect(run.status, `exit status; stderr: ${run.stderr}`).to.equal(status);
  expect(run.stderr).to.match(pattern);
  expect(run.stderr, 'a stack trace').not.to.match(/^\s+at .+:\d+:\d+\)?$/m);
  expect(run.stderr).not.to.include('unexpected failure');
}

/** A fresh temporary directory for one test file's outputs. */
export function scratchDir(): string {
  return mkdtempSync(join(tmpdir(), 'stowage-cli-'));
}

/**
 * A small trace: three allocations on one stream (one of 3 MiB, two small), frees of two, with addresses and times,
 * written as JSON lines. Replayed through the pytorch configuration it takes one 20 MiB and one 2 MiB segment.
 */
export const SMALL_TRACE: readonly TraceEvent[] = [
  { action: 'alloc', id: 0, size: 3 << 20, stream: 0, addr: 0x1000000, timeUs: 0 },
  { action: 'alloc', id: 1, size: 1000, stream: 0, addr: 0x2000000, timeUs: 10 },
  { action: 'alloc', id: 2, size: 4096, stream: 0, addr: 0x2000400, timeUs: 20 },
  { action: 'free_requested', id: 1, size: 1000, stream: 0, addr: 0x2000000, timeUs: 30 },
  { action: 'free_completed', id: 1, size: 1000, stream: 0, addr: 0x2000000, timeUs: 30 },
  { action: 'free_requested', id: 0, size: 3 << 20, stream: 0, addr: 0x1000000, timeUs: 40 },
  { action: 'free_completed', id: 0, size: 3 << 20, stream: 0, addr: 0x1000000, timeUs: 40 },
];

/** Writes {@link SMALL_TRACE} as JSON lines into `dir`; returns the path. */
export function writeSmallTrace(dir: string): string {
  const path = join(dir, 'small.jsonl');
  writeFileSync(path, formatTraceLines(SMALL_TRACE));
  return path;
}

/** Writes an RMM replay log (what RMM's logging_resource_adaptor writes) of the same allocations into `dir`. */
export function writeSmallRmmLog(dir: string): string {
  const path = join(dir, 'small.csv');
  const rows = [
    RMM_CSV_HEADER,
    `1,0.000001,allocate,0x1000000,${3 << 20},0x0`,
    '1,0.000010,allocate,0x2000000,1000,0x0',
    '1,0.000020,allocate,0x2000400,4096,0x0',
    '1,0.000030,free,0x2000000,1000,0x0',
    `1,0.000040,free,0x1000000,${3 << 20},0x0`,
  ];
  writeFileSync(path, `${rows.join('\n')}\n`);
  return path;
}

/**
 * A real trace of ../shared/traces (`pytorch/<name>.jsonl.gz`), or undefined (with the reason logged) when there is
 * no trace root.
 */
export function realTrace(name: string): string | undefined {
  const root = findTraceRoot();
  if (root === undefined) {
    console.log('    skipped: no shared/traces directory above the working directory (set STOWAGE_TRACES)');
    return undefined;
  }
  return join(root, 'pytorch', `${name}.jsonl.gz`);
}

/** The PyTorch snapshot pickle of ../shared/traces/examples, or undefined (with the reason logged) when absent. */
export function examplePickle(): string | undefined {
  const root = findTraceRoot();
  if (root === undefined) {
    console.log('    skipped: no shared/traces directory above the working directory (set STOWAGE_TRACES)');
    return undefined;
  }
  return join(root, 'examples', 'cs336_small_ctx256_b32_fwdbwd_windows.pickle');
}

/** The boxes of a flame graph SVG: name, bytes and depth of each `<g>`. */
export function flameBoxes(svg: string): { name: string; bytes: number; depth: number }[] {
  return [...svg.matchAll(/<g data-name="([^"]*)" data-bytes="(\d+)" data-depth="(\d+)">/g)].map((m) => ({ name: m[1]!, bytes: Number(m[2]), depth: Number(m[3]) }));
}
