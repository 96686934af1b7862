import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { EXIT } from '@stowage/cli';
import { formatTraceLines } from '@stowage/snapshot-pickle';
import { examplePickle, expectCleanFailure, realTrace, runStowage, scratchDir, writeSmallRmmLog, writeSmallTrace } from './runStowage.js';

describe('stowage replay', function () {
  this.timeout(60_000);
  const dir = scratchDir();
  const trace = writeSmallTrace(dir);

  it('replays a JSON-lines trace and prints a summary table of peaks and segments', () => {
    const run = runStowage(['replay', trace]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(run.stdout).to.match(/stowage \(pytorch\)/);
    expect(run.stdout).to.match(/peak reserved\s+22\.00 MiB/); // a 20 MiB and a 2 MiB segment
    expect(run.stdout).to.match(/segments created\s+2\b/);
  });

  it('prints one JSON document with --json, for scripts', () => {
    const run = runStowage(['--json', 'replay', trace, '--allocator', 'best']);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const report = JSON.parse(run.stdout) as Record<string, unknown>;
    expect(report).to.include({ allocator: 'best', format: 'trace-jsonl', allocs: 3, frees: 2, peakLiveBytes: (3 << 20) + 1000 + 4096, oomAtOp: null });
  });

  it('replays an RMM CSV log', () => {
    const run = runStowage(['--json', 'replay', writeSmallRmmLog(dir)]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(run.stdout)).to.include({ format: 'rmm-csv', allocs: 3, frees: 2, peakReservedBytes: 22 << 20 });
  });

  it("replays a PyTorch snapshot pickle beside PyTorch's own figures from the traces README", function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const run = runStowage(['--json', 'replay', pickle]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const report = JSON.parse(run.stdout) as { format: string; peakLiveBytes: number; pytorch: { source: string; segments: number } | null };
    expect(report.format).to.equal('snapshot-pickle');
    expect(report.peakLiveBytes / 2 ** 30).to.be.closeTo(12.968, 0.001); // the traces README's peak live GiB
    expect(report.pytorch).to.deep.include({ source: 'traces README', segments: 216 });
    const table = runStowage(['replay', pickle]);
    expect(table.stdout).to.match(/pytorch \(traces README\)/).and.to.match(/13\.207 GiB/);
  });

  it("sets a trace's own segment events beside the replay as PyTorch's, an expandable segment's maps counted as segments", () => {
    const withSegments = join(dir, 'segments.jsonl');
    writeFileSync(withSegments, formatTraceLines([
      { action: 'segment_alloc', id: -1, size: 20 << 20, stream: 0, addr: 0x1000000 },
      { action: 'alloc', id: 0, size: 3 << 20, stream: 0, addr: 0x1000000 },
      { action: 'segment_map', id: -1, size: 2 << 20, stream: 0, addr: 0x7000000 },
      { action: 'alloc', id: 1, size: 1 << 20, stream: 0, addr: 0x7000000 },
      { action: 'free_requested', id: 0, size: 3 << 20, stream: 0, addr: 0x1000000 },
      { action: 'free_completed', id: 0, size: 3 << 20, stream: 0, addr: 0x1000000 },
    ]));
    const run = runStowage(['--json', 'replay', withSegments]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const report = JSON.parse(run.stdout) as { pytorch: unknown; recording: unknown };
    expect(report.pytorch).to.deep.include({ source: 'trace', segments: 2, peakReservedBytes: 22 << 20 });
    expect(report.recording).to.equal(null);
    expect(runStowage(['replay', withSegments]).stdout).to.match(/pytorch \(trace\)/).and.to.match(/segments created\s+\d+\s+2\n/);
  });

  it("sets a snapshot Stowage recorded beside the recording's own figures, not PyTorch's: its segment_alloc entries as segments, page maps apart", () => {
    for (const [allocator, segments, pageMaps] of [['pytorch', 2, 0], ['best', 0, 1]] as const) {
      const json = join(dir, `recorded-${allocator}.json`);
      expect(runStowage(['snapshot', trace, '-a', allocator, '--at', 'end', '-o', json]).status).to.equal(EXIT.ok);
      const run = runStowage(['--json', 'replay', json]);
      expect(run.status, run.stderr).to.equal(EXIT.ok);
      const report = JSON.parse(run.stdout) as { pytorch: unknown; recording: { recordedBy: string; segments: number; pageMaps: number } };
      expect(report.pytorch, allocator).to.equal(null);
      expect(report.recording, allocator).to.deep.include({ recordedBy: `stowage ${allocator}`, segments, pageMaps });
      const table = runStowage(['replay', json]).stdout;
      expect(table).to.include(`recording (stowage ${allocator})`).and.not.to.include('pytorch (trace)');
      expect(table).to.match(new RegExp(`segments created\\s+\\d+\\s+${segments}\\n`));
      if (pageMaps > 0) expect(table).to.match(new RegExp(`pages mapped \\(expandable\\)\\s+${pageMaps}\\n`)).and.to.include("an expandable segment's reservation is not in its trace");
    }
  });

  it('exits with 4 and says so when the replay runs out of device memory', () => {
    const run = runStowage(['replay', trace, '--capacity', '4MiB']);
    expect(run.status, run.stderr).to.equal(EXIT.outOfMemory);
    expect(run.stdout).to.match(/out of memory\s+at operation 0/);
    expect(run.stderr).to.equal('stowage: the replay ran out of memory at operation 0 of 7 on a virtual device of 4.00 MiB; give a larger --capacity (or --limit) to replay it to its end.\n');
  });

  it("replays the multi-stream trace on its own streams with --streams, through each allocator", function () {
    const trace = realTrace('llama7b_offload_inference_multistream.dev0');
    if (trace === undefined) this.skip();
    for (const allocator of ['pytorch', 'best']) {
      const run = runStowage(['--json', 'replay', trace, '--streams', '-a', allocator]);
      expect(run.status, run.stderr).to.equal(EXIT.ok);
      const report = JSON.parse(run.stdout) as { allocs: number; frees: number; segments: number; oomAtOp: number | null; peakLiveBytes: number };
      expect(report).to.include({ allocs: 3253, frees: 3053, oomAtOp: null });
      expect(report.peakLiveBytes / 2 ** 30).to.be.closeTo(19.374, 0.001); // the traces README's peak live GiB
      expect(report.segments).to.be.greaterThan(0);
    }
  });

  it('reads standard input for -, gzipped or not', function () {
    const run = runStowage(['--json', 'replay', '-'], { input: readFileSync(trace) });
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(run.stdout)).to.include({ trace: 'stdin', allocs: 3, frees: 2, peakReservedBytes: 22 << 20 });
    const real = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
    if (real === undefined) this.skip();
    const fromFile = JSON.parse(runStowage(['--json', 'replay', real]).stdout) as Record<string, unknown>;
    const fromStdin = runStowage(['--json', 'replay', '-'], { input: readFileSync(real) });
    expect(fromStdin.status, fromStdin.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(fromStdin.stdout)).to.include({ events: fromFile.events, segments: fromFile.segments, peakReservedBytes: fromFile.peakReservedBytes });
  });

  it('refuses a --device the input lacks, naming the devices it has, exit 3', function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const run = runStowage(['replay', pickle, '--device', '3']);
    expectCleanFailure(run, EXIT.input, /has nothing on device 3; it has device 0: give --device 0\. \[DEVICE_MISMATCH\]/);
    expect(run.stdout).to.equal('');
    const qwen = realTrace('qwen3_train_expandable_3gpu_oom.dev1');
    expectCleanFailure(runStowage(['replay', qwen!, '--device', '0']), EXIT.input, /has nothing on device 0; it has device 1/);
    expect(runStowage(['replay', qwen!, '--device', '1']).status).to.equal(EXIT.outOfMemory); // it ran out of memory under PyTorch too
  });

  it('refuses a truncated pickle as MALFORMED_PICKLE and one that imports code as UNSAFE_PICKLE, exit 3', function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const truncated = join(dir, 'truncated.pickle');
    writeFileSync(truncated, readFileSync(pickle).subarray(0, 4096));
    expectCleanFailure(runStowage(['replay', truncated]), EXIT.input, /truncated\.pickle: Cannot read the pickle at byte \d+: .*\[MALFORMED_PICKLE\]\nThe pickle is truncated or corrupt/);
    // Protocol 4: STACK_GLOBAL of os.system, then a call; and the same in protocol 0 (GLOBAL), which has no PROTO.
    const unsafe = join(dir, 'unsafe.pickle');
    writeFileSync(unsafe, Buffer.concat([Buffer.from([0x80, 0x04, 0x8c, 0x02]), Buffer.from('os'), Buffer.from([0x8c, 0x06]), Buffer.from('system'), Buffer.from([0x93, 0x8c, 0x02]), Buffer.from('ls'), Buffer.from([0x85, 0x52, 0x2e])]));
    expectCleanFailure(runStowage(['replay', unsafe]), EXIT.input, /unsafe\.pickle: Refused the pickle at byte \d+: STACK_GLOBAL of os\.system .*\[UNSAFE_PICKLE\]/);
    const unsafe0 = join(dir, 'unsafe0.pickle');
    writeFileSync(unsafe0, "cos\nsystem\n(S'ls'\ntR.");
    expectCleanFailure(runStowage(['replay', unsafe0]), EXIT.input, /GLOBAL of os\.system .*\[UNSAFE_PICKLE\]/);
  });

  it('refuses a missing file with what to give instead, exit 3, no stack trace', () => {
    expectCleanFailure(runStowage(['replay', join(dir, 'missing.jsonl')]), EXIT.input, /No file at .*missing\.jsonl; give the path of a trace .*\[FILE_NOT_FOUND\]/);
  });

  it('refuses a file of another format, quoting how it begins, exit 3', () => {
    const png = join(dir, 'picture.jsonl');
    writeFileSync(png, Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]));
    expectCleanFailure(runStowage(['replay', png]), EXIT.input, /picture\.jsonl is not a trace .*: it begins with the bytes 89 50 4e 47.*\[UNKNOWN_FORMAT\]/);
  });

  it('refuses a trace with a bad line, naming the line, exit 3', () => {
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(bad, '{"action":"alloc","id":0,"size":16,"stream":0}\n{"action":"alloc","id":1,"size":-4}\n');
    expectCleanFailure(runStowage(['replay', bad]), EXIT.input, /reading it as a JSON-lines trace failed: size on line 2/);
  });

  it('refuses an unknown allocator name, naming the nearest and the known ones, exit 2', () => {
    expectCleanFailure(runStowage(['replay', trace, '--allocator', 'pytorh']), EXIT.usage, /--allocator must be 'pytorch' \(the nearest name\) or one of pytorch, best/);
  });

  it('refuses a missing argument and an unknown flag with usage, exit 2', () => {
    expectCleanFailure(runStowage(['replay']), EXIT.usage, /missing required argument 'trace'[\s\S]*stowage replay --help/);
    expectCleanFailure(runStowage(['replay', trace, '--frobnicate']), EXIT.usage, /unknown option '--frobnicate'/);
  });

  it('refuses an unknown command, exit 2', () => {
    expectCleanFailure(runStowage(['frob']), EXIT.usage, /unknown command 'frob'/);
  });
});
