import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { expect } from 'chai';
import type { ReadPhase } from '@stowage/cli';
import { MissingDeviceError, readInput } from '@stowage/cli';
import { examplePickle, realTrace } from './runStowage.js';

describe('readInput', function () {
  this.timeout(60_000);

  it('reports reading, decompressing and parsing a gzipped trace, each phase to its end', async function () {
    const trace = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
    if (trace === undefined) this.skip();
    const reports: { phase: ReadPhase; done: number; total: number }[] = [];
    const input = await readInput(trace, { onProgress: (phase, done, total) => reports.push({ phase, done, total }) });
    expect(input.events).to.have.length(23105);
    expect([...new Set(reports.map((r) => r.phase))]).to.deep.equal(['reading', 'decompressing', 'parsing']);
    for (const phase of ['reading', 'decompressing', 'parsing'] as const) {
      const last = reports.filter((r) => r.phase === phase).at(-1)!;
      expect(last.done, phase).to.equal(last.total);
      expect(last.total, phase).to.be.greaterThan(0);
    }
    // The decompressed JSON lines are larger than the file: parsing counts them, not the file's bytes.
    expect(reports.find((r) => r.phase === 'parsing')!.total).to.be.greaterThan(reports.find((r) => r.phase === 'reading')!.total);
  });

  it('reads - from the given standard input, as the same events as the file', async function () {
    const trace = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
    if (trace === undefined) this.skip();
    const fromFile = await readInput(trace);
    const fromStdin = await readInput('-', { stdin: Readable.from([readFileSync(trace)]) });
    expect(fromStdin).to.include({ name: 'stdin', format: 'trace-jsonl' });
    expect(fromStdin.events).to.deep.equal(fromFile.events);
  });

  it("picks a snapshot's first device by default and refuses one it lacks, naming those it has", async function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const input = await readInput(pickle);
    expect(input).to.deep.include({ device: 0, devices: [0] });
    let error: unknown;
    try {
      await readInput(pickle, { device: 1 });
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(MissingDeviceError).and.to.deep.include({ device: 1, devices: [0] });
  });

  it("keeps a trace's device and filters on it", async function () {
    const trace = realTrace('qwen3_train_expandable_3gpu_oom.dev2');
    if (trace === undefined) this.skip();
    const input = await readInput(trace, { device: 2 });
    expect(input.devices).to.deep.equal([2]);
    expect(input.events.length).to.be.greaterThan(0);
    expect(input.events.every((e) => e.device === 2)).to.equal(true);
  });
});
