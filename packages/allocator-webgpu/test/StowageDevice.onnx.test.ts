import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, settleStowageDevice, stowageDevice, stowageDeviceCounts, stowageDevicePaging } from '@stowage/allocator-webgpu';
import { ortDevice } from '@stowage/lab/onnx';
import type { Ort } from './ortOnDawn.js';
import { useOrtOnDawn } from './ortOnDawn.js';


/** Runs silero VAD `steps` times on `device` (the recurrent state fed back), returning every output's bytes. */
async function runSilero(ort: Ort, model: Uint8Array, device: GPUDevice, steps: number): Promise<Uint8Array[]> {
  const session = await ort.InferenceSession.create(model, { executionProviders: [{ name: 'webgpu', device } as never] });
  const outputs: Uint8Array[] = [];
  let state = new ort.Tensor('float32', new Float32Array(2 * 128), [2, 1, 128]);
  try {
    for (let step = 0; step < steps; step++) {
      const input = new ort.Tensor('float32', Float32Array.from({ length: 512 }, (_, i) => Math.sin((i + step * 512) / 7)), [1, 512]);
      const sr = new ort.Tensor('int64', BigInt64Array.from([16000n]), []);
      const result = await session.run({ input, state, sr });
      outputs.push(new Uint8Array((result['output']!.data as Float32Array).slice().buffer));
      state = result['stateN'] as typeof state;
      outputs.push(new Uint8Array((state.data as Float32Array).slice().buffer));
    }
  } finally {
    await session.release();
  }
  return outputs;
}

/** The budget of the paged pair (see its test). */
const PAGED_BUDGET = 4 * 2 ** 20;

/** A silero model's recurrent state: input name, output name, shape. */
type SileroState = readonly { input: string; output: string; dims: number[] }[];
const SILERO_V5_STATE: SileroState = [{ input: 'state', output: 'stateN', dims: [2, 1, 128] }];
const SILERO_LEGACY_STATE: SileroState = [
  { input: 'h', output: 'hn', dims: [2, 1, 64] },
  { input: 'c', output: 'cn', dims: [2, 1, 64] },
];

/**
 * Opens a session of a silero model on `device`; each call of the stepper returned runs one step (its state fed
 * back) and returns the bytes of every output. `release` ends the session.
 */
async function sileroStepper(ort: Ort, model: Uint8Array, device: GPUDevice, stateOf: SileroState) {
  const session = await ort.InferenceSession.create(model, { executionProviders: [{ name: 'webgpu', device } as never] });
  const state: Record<string, InstanceType<Ort['Tensor']>> = Object.fromEntries(
    stateOf.map((s) => [s.input, new ort.Tensor('float32', new Float32Array(s.dims.reduce((a, b) => a * b, 1)), s.dims)]),
  );
  let step = 0;
  const next = async (): Promise<Uint8Array[]> => {
    const input = new ort.Tensor('float32', Float32Array.from({ length: 512 }, (_, i) => Math.sin((i + step * 512) / 7)), [1, 512]);
    step++;
    const result = await session.run({ input, sr: new ort.Tensor('int64', BigInt64Array.from([16000n]), []), ...state });
    const outputs = [new Uint8Array((result['output']!.data as Float32Array).slice().buffer)];
    for (const s of stateOf) {
      state[s.input] = result[s.output] as InstanceType<Ort['Tensor']>;
      outputs.push(new Uint8Array((state[s.input]!.data as Float32Array).slice().buffer));
    }
    return outputs;
  };
  return { next, release: () => session.release() };
}

// Issue 36 step 2: onnxruntime-web's WebGPU execution provider (the native one, `ort.webgpu` — its C++ EP in the
// asyncify WebAssembly build) on the Stowage device, in Node on Dawn, against the same EP on a plain device.
describe('stowageDevice under onnxruntime-web', function () {
  this.timeout(600_000);
  const suite = useOrtOnDawn();
  let context: WebGpuContext;
  let ort: Ort;
  before(() => ({ context, ort } = suite()));

  const sileroPair = () => {
    const vadDir = dirname(createRequire(import.meta.url).resolve('@ricky0123/vad-web'));
    return [
      { bytes: readFileSync(join(vadDir, 'silero_vad_v5.onnx')), state: SILERO_V5_STATE },
      { bytes: readFileSync(join(vadDir, 'silero_vad_legacy.onnx')), state: SILERO_LEGACY_STATE },
    ];
  };
  const PAIR_STEPS = 3;
  let pairExpected: Promise<Uint8Array[][][]> | undefined;
  /** Each silero model alone on a plain device, PAIR_STEPS steps: outputs per model, step, output (computed once). */
  const plainPairOutputs = (): Promise<Uint8Array[][][]> =>
    (pairExpected ??= (async () => {
      const expected: Uint8Array[][][] = [];
      for (const model of sileroPair()) {
        const plain = await ortDevice(context.keepAlive as GPU);
        const run = await sileroStepper(ort, model.bytes, plain.device, model.state);
        const outputs: Uint8Array[][] = [];
        for (let step = 0; step < PAIR_STEPS; step++) outputs.push(await run.next());
        await run.release();
        expected.push(outputs);
        plain.device.destroy();
      }
      return expected;
    })());
  const expectPairOutputs = (actual: Uint8Array[][][], expected: Uint8Array[][][]) =>
    actual.forEach((outputs, m) =>
      outputs.forEach((step, s) =>
        step.forEach((bytes, o) => expect(Buffer.from(bytes).equals(Buffer.from(expected[m]![s]![o]!)), `model ${m}, step ${s}, output ${o} bit-identical`).to.equal(true)),
      ),
    );

  it('runs silero VAD v5 (3 steps, state fed back) bit-identical to a plain device, its storage buffers ranges of a few segments', async () => {
    const vadDir = dirname(createRequire(import.meta.url).resolve('@ricky0123/vad-web'));
    const model = readFileSync(join(vadDir, 'silero_vad_v5.onnx'));
    const gpu = context.keepAlive as GPU;

    const plain = await ortDevice(gpu);
    const expected = await runSilero(ort, model, plain.device, 3);

    const own = await ortDevice(gpu);
    using allocator = createWebGpuAllocator({ device: own.device, keepAlive: gpu, adapterInfo: 'ORT test device', owned: false }, { limit: '256MiB' });
    const device = stowageDevice(allocator);
    const actual = await runSilero(ort, model, device, 3);

    expect(actual.length).to.equal(expected.length);
    actual.forEach((bytes, i) => expect(Buffer.from(bytes).equals(Buffer.from(expected[i]!)), `output ${i} bit-identical`).to.equal(true));
    const counts = stowageDeviceCounts(device)!;
    const stats = allocator.memoryStats();
    console.log(
      `    plain: ${plain.count.calls} createBuffer, peak ${plain.count.peakBytes} bytes in live buffers; Stowage: ${counts.createBuffer} asked, ` +
        `${counts.subAllocated} became ranges; ${own.count.calls} real createBuffer (${allocator.backend.createdBuffers} of them segments), ` +
        `peak ${own.count.peakBytes} bytes in live buffers (${stats['reserved_bytes.all.peak']} reserved in segments); ` +
        `${counts.scratch} scratch copies, ${counts.aliasCopies} alias copies, ${counts.indirectCopies} indirect copies`,
    );
    expect(counts.subAllocated, 'every storage buffer onnxruntime-web asked for is a range').to.be.greaterThan(0);
    expect(own.count.calls).to.be.lessThan(plain.count.calls);
  });

  // Issue 36, several sessions under one budget: two different models share one Stowage device and its budget,
  // stepping in turn, each giving the bits it gives alone on a plain device.
  it('runs two sessions (silero VAD v5 and legacy) in turn on one Stowage device under one budget, each bit-identical to running alone on a plain device', async () => {
    const models = sileroPair();
    const gpu = context.keepAlive as GPU;
    const steps = PAIR_STEPS;
    const expected = await plainPairOutputs();

    const own = await ortDevice(gpu);
    // 8 MiB: below the 8.6 MB the two reserve together under a loose budget, above the smallest budget they run in
    // (about 5.9 MiB on SwiftShader: `pnpm bench:ort`'s shared line).
    using allocator = createWebGpuAllocator({ device: own.device, keepAlive: gpu, adapterInfo: 'ORT test device', owned: false }, { limit: '8MiB' });
    const device = stowageDevice(allocator);
    const runs = [];
    for (const model of models) runs.push(await sileroStepper(ort, model.bytes, device, model.state));
    const actual: Uint8Array[][][] = [[], []];
    for (let step = 0; step < steps; step++) for (let m = 0; m < runs.length; m++) actual[m]!.push(await runs[m]!.next());
    for (const run of runs) await run.release();

    expectPairOutputs(actual, expected);
    expect(allocator.memoryStats()['reserved_bytes.all.peak']).to.be.at.most(8 * 2 ** 20);
  });

  // Issue 36, LMS between runs (Note [Paging between runs]): under a budget below what the pair needs without
  // paging, the device pages the idle session's ranges out while the other runs, and back in for its next run.
  it('runs the two sessions in turn under a budget below their sum, paging the idle one out between runs, each bit-identical to running alone on a plain device', async () => {
    const models = sileroPair();
    const expected = await plainPairOutputs();
    const own = await ortDevice(context.keepAlive as GPU);
    // PAGED_BUDGET: below the smallest budget the pair runs in without paging (6,225,920 B: `pnpm bench:ort`'s
    // shared line) and below either sum of peaks, above v5's allocated peak alone. Host copies are staged in a
    // paging reserve of a sixteenth of it.
    const budget = PAGED_BUDGET;
    using allocator = createWebGpuAllocator({ device: own.device, keepAlive: context.keepAlive, adapterInfo: 'ORT test device', owned: false }, { limit: budget, pagingReserve: { fraction: 1 / 16 } });
    const device = stowageDevice(allocator, 'webgpu:0', { paging: true });
    const runs = [];
    for (const model of models) {
      runs.push(await sileroStepper(ort, model.bytes, device, model.state));
      await settleStowageDevice(device); // an idle point: host copies of what changed
    }
    const actual: Uint8Array[][][] = [[], []];
    for (let step = 0; step < PAIR_STEPS; step++)
      for (let m = 0; m < runs.length; m++) {
        actual[m]!.push(await runs[m]!.next());
        await settleStowageDevice(device);
      }
    for (const run of runs) await run.release();

    expectPairOutputs(actual, expected);
    const paging = stowageDevicePaging(device)!;
    const peak = allocator.backend.budget.stats()['device_bytes.peak'];
    console.log(`    budget ${budget} B: Stowage's device peak ${peak} B (segments and staging); paging ${JSON.stringify(paging)}`);
    expect(paging.pagedIn, 'an idle session\'s ranges came back for its next run').to.be.greaterThan(0);
    // The allowance: the byte-copy kernel's 16-byte params buffer (Note [One budget] in DeviceBudget.ts).
    expect(peak).to.be.at.most(budget + 16);
  });

  // The JSEP build (`onnxruntime-web`'s main entry) starts its device once per process from env.webgpu.adapter:
  // each device runs in a child process (test/onnxJsepRun.ts), which prints a hash of every output.
  it('runs silero VAD v5 on the JSEP build (its adapter answering with the Stowage device) bit-identical to a plain device', () => {
    const vadDir = dirname(createRequire(import.meta.url).resolve('@ricky0123/vad-web'));
    const script = join(dirname(fileURLToPath(import.meta.url)), 'onnxJsepRun.js');
    const run = (mode: string) => {
      const child = spawnSync(process.execPath, [script, mode, join(vadDir, 'silero_vad_v5.onnx')], { encoding: 'utf8', timeout: 280_000 });
      const line = child.stdout.split('\n').find((l) => l.startsWith('{'));
      expect(line, `${mode}: ${child.stderr.slice(-2000)}`).to.be.a('string');
      return JSON.parse(line!) as { sha256: string; counts: Record<string, number> | null };
    };
    const plain = run('plain');
    const stowage = run('stowage');
    console.log(`    JSEP on the Stowage device: ${JSON.stringify(stowage.counts)}`);
    expect(stowage.sha256).to.equal(plain.sha256);
    expect(stowage.counts!['subAllocated']).to.be.greaterThan(0);
  });
});
