import { expect } from 'chai';
import type { BenchRecord, BenchReporter } from '@stowage/lab/bench-kit';
import type { ModelTrace, TraceOp, TraceTensor } from '@stowage/example-train';
import { peakLiveBytes } from '@stowage/example-train';
import { bertTrace, gpt2Trace, resnet50Trace, unet3dTrace, vgg16Trace } from './models.js';
import { publishedRows } from './published.bench.js';
import { runAddressOnly } from './runAddressOnly.js';
import type { DeviceName } from './setups.js';
import { computeModelOf, DEVICES } from './setups.js';
import { LINK_PROFILES } from '@stowage/lab';

// Each published model's trace at its paper's size: one layer's shapes, bytes and flops against figures worked out
// by hand, its parameter count against the architecture's, and one iteration under LMS on an address-only device
// of the paper's memory.

function tensor(trace: ModelTrace, name: string): TraceTensor {
  const found = [...trace.persistent, ...trace.iteration(0).tensors].find((t) => t.name === name);
  if (found === undefined) throw new Error(`${trace.name} has no tensor ${name}`);
  return found;
}

function op(trace: ModelTrace, name: string): TraceOp {
  const found = trace.iteration(0).ops.find((o) => o.name === name);
  if (found === undefined) throw new Error(`${trace.name} has no op ${name}`);
  return found;
}

/** Parameters: the persistent tensors that are weights (not optimizer state), in elements of `bytesPerElement`. */
function parameters(trace: ModelTrace, bytesPerElement: number): number {
  const state = /^(momentum|adam\.m|adam\.v|master)\./;
  return trace.persistent.filter((t) => !state.test(t.name)).reduce((sum, t) => sum + t.bytes, 0) / bytesPerElement;
}

/** One iteration under LMS (lru) at the device's memory: it runs, stays within the memory, and pages. */
async function expectOneIterationFits(trace: ModelTrace, device: DeviceName): Promise<void> {
  const profile = DEVICES[device];
  expect(peakLiveBytes(trace, 1), 'the working set exceeds the device').to.be.greaterThan(profile.memoryBytes);
  const run = await runAddressOnly({ trace, iterations: 1, budgetBytes: profile.memoryBytes, link: LINK_PROFILES[profile.link], computeModel: computeModelOf(profile), policy: 'lru', speculation: false });
  expect(run.error, 'no OutOfMemoryError').to.equal(undefined);
  expect(run.fits).to.equal(true);
  expect(run.reservedPeakBytes).to.be.at.most(profile.memoryBytes);
  expect(run.iterations[0]!.d2hBytes, 'bytes paged out').to.be.greaterThan(0);
}

describe('published traces (issue 33)', () => {
  describe('ResNet-50 at batch 1,440 (fp32)', () => {
    const trace = resnet50Trace();

    it('has conv1 as 7×7/2 from 3 to 64 channels: 9,408 weights, a 1440×64×112×112 output, 2·1440·112²·3·64·49 flops', () => {
      expect(tensor(trace, 'conv1.weight').bytes).to.equal(9408 * 4);
      expect(tensor(trace, 'conv1.out').bytes).to.equal(1440 * 64 * 112 * 112 * 4); // 4,624,220,160 bytes
      expect(op(trace, 'conv1').flops).to.equal(2 * 1440 * 112 * 112 * 3 * 64 * 49);
      expect(tensor(trace, 'stage2.block1.conv2.out').bytes, 'the stride-2 3×3 conv of stage 2: 56 → 28').to.equal(1440 * 128 * 28 * 28 * 4);
    });

    it("has ResNet-50's 25,557,032 parameters less the FC's 1,000 biases", () => {
      expect(parameters(trace, 4)).to.equal(25_556_032);
    });

    it('runs one iteration on a 16 GB V100 over NVLink 2.0 under LMS', async () => {
      await expectOneIterationFits(trace, 'v100-16gb-nvlink2');
    });
  });

  describe('VGG-16 at batch 256 (fp32)', () => {
    const trace = vgg16Trace();

    it('has conv1 as 3×3 from 3 to 64 channels at 224²: 1,728 weights and a 3,288,334,336-byte output; fc6 25,088 × 4,096', () => {
      expect(tensor(trace, 'conv1.weight').bytes).to.equal(1728 * 4);
      expect(tensor(trace, 'conv1.out').bytes).to.equal(3_288_334_336);
      expect(op(trace, 'conv1').flops).to.equal(2 * 256 * 224 * 224 * 3 * 64 * 9);
      expect(tensor(trace, 'fc6.weight').bytes).to.equal(25_088 * 4096 * 4);
    });

    it("has VGG-16's 138,357,544 parameters less its 13,416 biases", () => {
      expect(parameters(trace, 4)).to.equal(138_344_128);
    });

    it('runs one iteration on a 12 GB Titan X over PCIe 3 under LMS', async () => {
      await expectOneIterationFits(trace, 'titanx-12gb-pcie3');
    });
  });

  describe('3D U-Net at batch 4 on 192³ (fp32)', () => {
    const trace = unet3dTrace();

    it('has down0.conv1 as 3×3×3 from 4 to 16 channels: 1,728 weights and a 4×16×192³ output; the level-0 concat twice as large', () => {
      expect(tensor(trace, 'down0.conv1.weight').bytes).to.equal(27 * 4 * 16 * 4);
      expect(tensor(trace, 'down0.conv1.out').bytes).to.equal(4 * 16 * 192 ** 3 * 4); // 1,811,939,328 bytes
      expect(op(trace, 'down0.conv1').flops).to.equal(2 * 4 * 192 ** 3 * 4 * 16 * 27);
      expect(tensor(trace, 'up0.concat.out').bytes).to.equal(2 * 4 * 16 * 192 ** 3 * 4);
      expect(tensor(trace, 'bottom.conv1.out').bytes, 'level 4: 256 channels at 12³').to.equal(4 * 256 * 12 ** 3 * 4);
    });

    it('runs one iteration on a 16 GB V100 over NVLink 2.0 under LMS', async () => {
      await expectOneIterationFits(trace, 'v100-16gb-nvlink2');
    });
  });

  describe('BERT-large at batch 64, sequence 128 (fp32)', () => {
    const trace = bertTrace();

    it('has layer 1 with a 1024 × 3072 QKV and 64·16 score matrices of 128 × 128, 2·64·128²·1024 flops', () => {
      expect(tensor(trace, 'layer1.qkv.weight').bytes).to.equal(1024 * 3072 * 4);
      expect(tensor(trace, 'layer1.attention.scores.out').bytes).to.equal(64 * 16 * 128 * 128 * 4); // 67,108,864 bytes
      expect(op(trace, 'layer1.attention.scores').flops).to.equal(2 * 64 * 128 * 128 * 1024);
      expect(tensor(trace, 'layer1.up.out').bytes).to.equal(64 * 128 * 4096 * 4);
    });

    it('has 334,919,680 parameters: BERT-large without biases, pooler and token types', () => {
      // 30,522·1024 + 512·1024 + 2·1024 (embeddings) + 24·(4·1024² + 2·1024·4096 + 4·1024) + 1024² + 2·1024 (MLM head)
      expect(parameters(trace, 4)).to.equal(334_919_680);
    });

    it('runs one iteration on a 16 GB P100 over PCIe 3 under LMS', async () => {
      await expectOneIterationFits(trace, 'p100-16gb-pcie3');
    });
  });

  describe('GPT-2 1.5B at batch 4, context 1024 (mixed precision, Adam)', () => {
    const trace = gpt2Trace();

    it('has block 1 with a 1600 × 6400 MLP and 4·25 score matrices of 1024 × 1024 in fp16', () => {
      expect(tensor(trace, 'h1.up.weight').bytes).to.equal(1600 * 6400 * 2);
      expect(tensor(trace, 'h1.attention.scores.out').bytes).to.equal(4 * 25 * 1024 * 1024 * 2); // 209,715,200 bytes
      expect(op(trace, 'h1.qkv').flops).to.equal(2 * 4 * 1024 * 1600 * 4800);
    });

    it('has 1,556,920,000 parameters and 14 persistent bytes each (fp16 weight, fp32 master, m and v)', () => {
      expect(parameters(trace, 2)).to.equal(1_556_920_000);
      expect(trace.persistent.reduce((sum, t) => sum + t.bytes, 0)).to.equal(1_556_920_000 * 14);
    });

    it('runs one iteration on a 32 GB V100 over PCIe 3 under LMS', async () => {
      await expectOneIterationFits(trace, 'v100-32gb-pcie3');
    });
  });

  describe('pnpm bench:lms -- --published --quick', () => {
    it("prints each setup with the paper's figure beside both configurations, and a summary whose targets say met", async function () {
      this.timeout(120_000);
      const emitted: BenchRecord[] = [];
      const reporter = { emit: (r: BenchRecord) => emitted.push(r), task: () => undefined, step: () => undefined, stop: () => undefined } as unknown as BenchReporter;
      await publishedRows(reporter, { quick: true, setups: ['vgg16-vdnn'] });
      const [row, summary] = emitted;
      expect(row).to.include({ scenario: 'published', simulated: true, setup: 'vgg16-vdnn', paperValue: 256 });
      expect(row!.paperFigure).to.contain('18 %');
      for (const config of ['lru', 'learned']) {
        const figures = row![config] as Record<string, number>;
        expect(figures, config).to.include({ at: 256, fits: true });
        // The physical bound (iterationLowerBound.ts) is at most the run's time; here, as the issue's, the kernels'.
        expect(figures.physicalBoundMs, config).to.be.above(0).and.at.most(figures.timeMs!);
        expect(figures.ceilingOutPhysical, config).to.be.at.most(figures.ceilingOut!);
      }
      const targets = (summary!.targets as Record<string, Record<string, { met: boolean | null; metVsPhysicalCeiling?: boolean | null }>>)['vgg16-vdnn']!;
      expect(Object.keys(targets)).to.include.members(['fitsAtBatch256', 'slowdownVsOracle', 'bytesAtMostBelady', 'hiddenOutVsCeiling', 'hiddenInVsCeiling', 'timeVsBound']);
      for (const [name, target] of Object.entries(targets)) expect(target.met, name).to.be.a('boolean');
      for (const name of ['hiddenOutVsCeiling', 'hiddenInVsCeiling', 'timeVsBound']) expect(targets[name]!.metVsPhysicalCeiling, name).to.be.a('boolean');
    });
  });
});
