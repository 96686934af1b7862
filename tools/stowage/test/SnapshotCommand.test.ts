import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { MemorySnapshot } from '@stowage/core';
import { readSnapshotPickle } from '@stowage/snapshot-pickle';
import { EXIT } from '@stowage/cli';
import { examplePickle, expectCleanFailure, realTrace, runStowage, scratchDir, writeSmallTrace } from './runStowage.js';

describe('stowage snapshot', function () {
  this.timeout(60_000);
  const dir = scratchDir();
  const trace = writeSmallTrace(dir);

  it("writes the allocator's snapshot after a chosen event as JSON, with the trace up to it", () => {
    const out = join(dir, 'at2.json');
    const run = runStowage(['snapshot', trace, '--at', '2', '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(run.stdout).to.match(/after event 2 of 7/);
    const snapshot = JSON.parse(readFileSync(out, 'utf8')) as MemorySnapshot;
    expect(snapshot.segments.map((s) => s.total_size).sort((a, b) => a - b)).to.deep.equal([2 << 20, 20 << 20]);
    const states = snapshot.segments.flatMap((s) => s.blocks.map((b) => b.state));
    expect(states.filter((s) => s === 'active_allocated')).to.have.length(3);
    expect(snapshot.device_traces[0]!.filter((e) => e.action === 'alloc')).to.have.length(3);
  });

  it('stops at the peak of live bytes by default and writes a pickle for a .pickle output', () => {
    const out = join(dir, 'peak.pickle');
    const run = runStowage(['--json', 'snapshot', trace, '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(run.stdout)).to.include({ format: 'pickle', event: 2, segments: 2 });
    const snapshot = readSnapshotPickle(readFileSync(out));
    expect(snapshot.segments).to.have.length(2);
  });

  it("re-exports a PyTorch snapshot pickle's replay as a pickle that Python's pickle loads with PyTorch's structure", function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const out = join(dir, 'example.pickle');
    const run = runStowage(['snapshot', pickle, '--replay', '--at', 'end', '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const script = [
      'import pickle, sys',
      'mine = pickle.load(open(sys.argv[1], "rb")); theirs = pickle.load(open(sys.argv[2], "rb"))',
      'print(sorted(mine) == sorted(theirs), sorted(mine["segments"][0]) == sorted(theirs["segments"][0]),',
      '      sorted(mine["segments"][0]["blocks"][0]) == sorted(theirs["segments"][0]["blocks"][0]),',
      '      sorted(mine["device_traces"][0][0]) == sorted(theirs["device_traces"][0][0]), len(mine["device_traces"][0]) > 0)',
    ].join('\n');
    let output: string;
    try {
      output = execFileSync('python3', ['-c', script, out, pickle], { encoding: 'utf8' });
    } catch (error) {
      console.log(`    skipped: python3 did not run (${(error as Error).message.split('\n')[0]})`);
      this.skip();
    }
    expect(output.trim()).to.equal('True True True True True');
  });

  it('converts a JSON snapshot to a pickle as it is, segment for segment, and replays it only with --replay', function () {
    const trace = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
    if (trace === undefined) this.skip();
    const json = join(dir, 'opt125m-peak.json');
    expect(runStowage(['snapshot', trace, '-o', json]).status).to.equal(EXIT.ok);
    const original = JSON.parse(readFileSync(json, 'utf8')) as MemorySnapshot;
    expect(original.segments.length).to.be.greaterThan(1);
    const pickle = join(dir, 'opt125m-peak.pickle');
    const run = runStowage(['--json', 'snapshot', json, '-o', pickle]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(run.stdout)).to.include({ replayed: false, segments: original.segments.length });
    const converted = readSnapshotPickle(readFileSync(pickle));
    expect(converted.segments).to.deep.equal(original.segments);
    expect(converted.device_traces[0]).to.have.length(original.device_traces[0]!.length);
    const replayed = runStowage(['--json', 'snapshot', json, '--replay', '--at', 'end', '-o', join(dir, 'replayed.json')]);
    expect(replayed.status, replayed.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(replayed.stdout)).to.include({ replayed: true, allocator: 'pytorch' });
    expectCleanFailure(runStowage(['snapshot', json, '--at', 'end', '-o', join(dir, 'x.json')]), EXIT.usage, /--at must be given with --replay: .* is a snapshot, converted as it is/);
  });

  it("converts a recording as it is: JSON keeps its LMS entries and keys, a pickle leaves them out and says how many", function () {
    const trace = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
    if (trace === undefined) this.skip();
    const json = join(dir, 'opt125m-100.json');
    expect(runStowage(['snapshot', trace, '--at', '100', '-o', json]).status).to.equal(EXIT.ok);
    // A recording (MemoryEventRecorder#toSnapshot) adds page_out / page_in entries and an lms_reclaimed key.
    const recording = JSON.parse(readFileSync(json, 'utf8')) as MemorySnapshot & { lms_reclaimed?: unknown };
    const entries = recording.device_traces[0]!;
    const alloc = entries.find((e) => e.action === 'alloc')!;
    (entries as unknown[]).push({ ...alloc, action: 'page_out' }, { ...alloc, action: 'page_in' });
    recording.lms_reclaimed = [];
    const path = join(dir, 'recording.json');
    writeFileSync(path, JSON.stringify(recording));
    const toPickle = runStowage(['--json', 'snapshot', path, '-o', join(dir, 'recording.pickle')]);
    expect(toPickle.status, toPickle.stderr).to.equal(EXIT.ok);
    expect(toPickle.stderr).to.match(/Left out 2 LMS and IPC trace entries/);
    expect(JSON.parse(toPickle.stdout)).to.include({ leftOutEntries: 2, segments: recording.segments.length, entries: entries.length - 2 });
    const toJson = runStowage(['snapshot', path, '-o', join(dir, 'recording-copy.json')]);
    expect(toJson.status, toJson.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(readFileSync(join(dir, 'recording-copy.json'), 'utf8'))).to.deep.equal(recording);
  });

  it('replays the multi-stream trace on its streams with --streams', function () {
    const trace = realTrace('llama7b_offload_inference_multistream.dev0');
    if (trace === undefined) this.skip();
    const out = join(dir, 'llama.json');
    const run = runStowage(['--json', 'snapshot', trace, '--streams', '-a', 'best', '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const snapshot = JSON.parse(readFileSync(out, 'utf8')) as MemorySnapshot;
    expect(new Set(snapshot.device_traces[0]!.filter((e) => e.action === 'alloc').map((e) => e.stream)).size).to.equal(10); // the trace's 10 streams
  });

  it("writes the allocator's state where a replay ran out of memory, saying so, exit 4", () => {
    // The second allocation (event 1, 1000 bytes) needs a 2 MiB segment beside the first's 20 MiB: 21 MiB does not hold both.
    const out = join(dir, 'oom.json');
    const run = runStowage(['--json', 'snapshot', trace, '--capacity', '21MiB', '--at', 'end', '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.outOfMemory);
    expect(run.stderr).to.equal("stowage: the replay of small ran out of memory at event 1 of 7; the output shows the allocator's state when it failed. Give a larger --capacity (or --limit) to replay it to its end.\n");
    expect(JSON.parse(run.stdout)).to.include({ event: 0, outOfMemoryAt: 1, segments: 1 });
    const snapshot = JSON.parse(readFileSync(out, 'utf8')) as MemorySnapshot;
    expect(snapshot.segments.map((s) => s.total_size)).to.deep.equal([20 << 20]);
  });

  it('refuses an output in a directory that does not exist before replaying, exit 2, one line', () => {
    const run = runStowage(['snapshot', trace, '-o', join(dir, 'no', 'such', 'x.json')]);
    expectCleanFailure(run, EXIT.usage, /^stowage: -o must be a file in an existing, writable directory \(no directory .*\); got .*\[INVALID_ARGUMENT\]\n$/);
  });

  it("refuses an --at past the trace's end, naming its length, exit 2", () => {
    expectCleanFailure(runStowage(['snapshot', trace, '--at', '99', '-o', join(dir, 'x.json')]), EXIT.usage, /--at must be an event index below 7/);
    expectCleanFailure(runStowage(['snapshot', trace, '--at', 'top', '-o', join(dir, 'x.json')]), EXIT.usage, /--at must be an event index/);
  });

  it('refuses a missing file, exit 3, no stack trace', () => {
    expectCleanFailure(runStowage(['snapshot', join(dir, 'nope.pickle')]), EXIT.input, /No file at .*nope\.pickle/);
  });
});
