import { expect } from 'chai';
import type { Allocator } from '@stowage/core';
import { InvalidArgumentError, OutOfMemoryError } from '@stowage/core';
import type { LmsRunModel, LmsRunResult, StepStatKey } from '@stowage/example-train';
import { runUnderLms, STEP_STAT_KEYS, unconstrainedPeak } from '@stowage/example-train';
import { deviceOrSkip, libcudaOrSkip, rejectionOf } from './testSupport.js';

// The training loop under LMS, against the same loop without a budget. The deep shapes are the ones whose largest
// op pins well under an eighth of the loop's peak (Note [Depth and LMS] in models.ts); the README lists their
// peaks, pinned peaks and step times.

/** Sixteen hidden layers of 128: peak about 2.5 MiB, pinned peak 128 KiB. */
const DEEP_MLP: LmsRunModel = { model: 'mlp', sizes: { hidden: 128, layers: 16 } };
/** Six blocks over 64 tokens of width 64: peak about 3.0 MiB, pinned peak 192 KiB. */
const DEEP_TRANSFORMER: LmsRunModel = { model: 'transformer', sizes: { sequence: 64, model: 64, hidden: 256, blocks: 6 } };

const STEPS = 3;
const BUDGET_DIVISORS = [2, 4, 8] as const;
const POLICIES = ['lru', 'best-fit'] as const;
/**
 * Runs with speculation on train this many steps: LMS learns the loop from the first steps' pins (the first also
 * makes the model), and the steps from FIRST_PREDICTED_STEP on repeat steps it has learned.
 */
const SPECULATION_STEPS = 5;
const FIRST_PREDICTED_STEP = 3;
const SPECULATION_POLICIES = ['lru', 'best-fit', 'speculative'] as const;

function bitsOf(values: Float32Array): number[] {
  return [...new Uint32Array(values.buffer, values.byteOffset, values.length)];
}

/** The same losses and final weights, bit for bit. */
function expectSameTraining(run: LmsRunResult, reference: LmsRunResult): void {
  expect(run.losses, 'losses').to.deep.equal(reference.losses);
  expect(run.weights.length, 'parameters').to.equal(reference.weights.length);
  for (const [i, weights] of run.weights.entries()) expect(bitsOf(weights), `parameter ${i}`).to.deep.equal(bitsOf(reference.weights[i]!));
}

function peakOf(run: LmsRunResult): number {
  return run.stats['reserved_bytes.all.peak']!;
}

/** Within the budget after every op, and at the peak. */
function expectWithinBudget(run: LmsRunResult, budgetBytes: number, under = ''): void {
  expect(run.maxReservedBytes, `reserved after an op ${under}`).to.be.at.most(budgetBytes);
  expect(peakOf(run), `peak reserved ${under}`).to.be.at.most(budgetBytes);
}

/** How much `key` grew over the steps from FIRST_PREDICTED_STEP on. */
function fromPredictedSteps(run: LmsRunResult, key: StepStatKey): number {
  return run.stepStats.slice(FIRST_PREDICTED_STEP).reduce((sum, step) => sum + step[key], 0);
}

describe('runUnderLms on the CPU', function () {
  this.timeout(120_000);

  for (const shape of [DEEP_MLP, DEEP_TRANSFORMER]) {
    describe(`a deep ${shape.model} (${JSON.stringify(shape.sizes)})`, () => {
      let unconstrained: LmsRunResult;
      before(async () => {
        unconstrained = await runUnderLms({ device: 'cpu', ...shape, steps: STEPS });
      });

      it('pins at most an eighth of its unconstrained peak at once, which unconstrainedPeak reports', async () => {
        expect(unconstrained.pinnedPeakBytes).to.be.greaterThan(0);
        expect(unconstrained.pinnedPeakBytes).to.be.at.most(peakOf(unconstrained) / 8);
        expect(await unconstrainedPeak({ device: 'cpu', ...shape, steps: STEPS })).to.equal(peakOf(unconstrained));
      });

      for (const divisor of BUDGET_DIVISORS) {
        for (const policy of POLICIES) {
          it(`trains under ${100 / divisor} % of that peak with ${policy} to the same losses and weights, bit for bit, paging and within the budget after every op`, async () => {
            const budgetBytes = Math.floor(peakOf(unconstrained) / divisor);
            const run = await runUnderLms({ device: 'cpu', ...shape, steps: STEPS, budgetBytes, policy });
            expectSameTraining(run, unconstrained);
            expect(run.maxReservedBytes, 'reserved after an op').to.be.at.most(budgetBytes);
            expect(peakOf(run), 'peak reserved').to.be.at.most(budgetBytes);
            expect(run.stats.page_out, 'page-outs').to.be.greaterThan(0);
            expect(run.stats.page_in, 'page-ins').to.be.greaterThan(0);
          });
        }
      }

      describe('with speculation on', () => {
        let unconstrainedLonger: LmsRunResult;
        before(async () => {
          unconstrainedLonger = await runUnderLms({ device: 'cpu', ...shape, steps: SPECULATION_STEPS });
        });

        for (const divisor of BUDGET_DIVISORS) {
          for (const policy of SPECULATION_POLICIES) {
            it(`trains under ${100 / divisor} % of its peak with ${policy} to the same losses and weights, bit for bit, within the budget after every op`, async () => {
              const budgetBytes = Math.floor(peakOf(unconstrained) / divisor);
              const run = await runUnderLms({ device: 'cpu', ...shape, steps: SPECULATION_STEPS, budgetBytes, policy, speculation: true });
              expectSameTraining(run, unconstrainedLonger);
              expectWithinBudget(run, budgetBytes);
              expect(run.stats.page_out, 'page-outs').to.be.greaterThan(0);
            });
          }
        }

        for (const policy of SPECULATION_POLICIES) {
          it(`under 25 % with ${policy}, from step ${FIRST_PREDICTED_STEP} on, pages out ahead of reclaims, which find those copies, and prefetches`, async () => {
            const budgetBytes = Math.floor(peakOf(unconstrained) / 4);
            const run = await runUnderLms({ device: 'cpu', ...shape, steps: SPECULATION_STEPS, budgetBytes, policy, speculation: true });
            const figures = JSON.stringify(Object.fromEntries(STEP_STAT_KEYS.map((key) => [key, fromPredictedSteps(run, key)])));
            expect(fromPredictedSteps(run, 'speculative_page_out'), figures).to.be.greaterThan(0);
            expect(fromPredictedSteps(run, 'speculative_hits'), figures).to.be.greaterThan(0);
            expect(fromPredictedSteps(run, 'prefetch'), figures).to.be.greaterThan(0);
          });
        }
      });
    });
  }

  it('ends one LMS iteration per step, and gives per step how much each counter grew in it', async () => {
    const { stats: unconstrained } = await runUnderLms({ device: 'cpu', ...DEEP_MLP, steps: STEPS });
    let allocator: Allocator | undefined;
    const atStepEnd: Readonly<Record<string, number>>[] = [];
    const run = await runUnderLms({
      device: 'cpu',
      ...DEEP_MLP,
      steps: STEPS,
      budgetBytes: Math.floor(unconstrained['reserved_bytes.all.peak']! / 4),
      speculation: true,
      onRuntime: (runtime) => void (allocator = runtime.allocator('cpu')),
      onStep: () => void atStepEnd.push(allocator!.memoryStats()),
    });
    expect(run.stats.iterations, 'one for making the model, one per step').to.equal(STEPS + 1);
    expect(run.stepStats).to.have.lengthOf(STEPS);
    for (const [step, end] of atStepEnd.entries()) {
      for (const key of STEP_STAT_KEYS) {
        expect(run.stepStats.slice(0, step + 1).reduce((sum, s) => sum + s[key], 0), `${key} by the end of step ${step}`).to.be.closeTo(end[key] ?? 0, 1e-9);
      }
    }
    // The first step's figures include making the model, which ends an LMS iteration of its own.
    expect(run.stepStats.map((s) => s.iterations)).to.deep.equal([2, ...Array(STEPS - 1).fill(1)]);
    expect(run.stepStats[1]!.page_out, 'page-outs in a step').to.be.greaterThan(0);
  });

  for (const shape of [
    { model: 'mlp', sizes: {} },
    { model: 'transformer', sizes: {} },
  ] as const) {
    it(`rejects training the default ${shape.model} under its pinned peak with an OutOfMemoryError that names the pinned bytes`, async () => {
      const { pinnedPeakBytes } = await runUnderLms({ device: 'cpu', ...shape, steps: 1 });
      const budgetBytes = Math.floor((pinnedPeakBytes * 3) / 4);
      for (const policy of POLICIES) {
        const error = await rejectionOf(runUnderLms({ device: 'cpu', ...shape, steps: 1, budgetBytes, policy }));
        expect(error, policy).to.be.instanceOf(OutOfMemoryError);
        expect((error as Error).message, policy).to.match(/pinned/);
      }
    });
  }

  it('rejects a budget that is not a positive whole number of bytes, and WebGPU without a GPUDevice', async () => {
    for (const budgetBytes of [0, -1, 1.5, Number.NaN]) {
      expect(await rejectionOf(runUnderLms({ device: 'cpu', ...DEEP_MLP, steps: 1, budgetBytes })), String(budgetBytes)).to.be.instanceOf(InvalidArgumentError);
    }
    expect(await rejectionOf(runUnderLms({ device: 'webgpu', ...DEEP_MLP, steps: 1 }))).to.be.instanceOf(InvalidArgumentError);
    expect(await rejectionOf(runUnderLms({ device: 'tpu' as 'cpu', ...DEEP_MLP, steps: 1 }))).to.be.instanceOf(InvalidArgumentError);
  });
});

// Dawn runs on SwiftShader where there is no GPU: a run of the deep shapes takes about a second or two there (its
// kernels are simple, and one op per dispatch), so they train on WebGPU too, at every budget; with speculation on,
// under a quarter of the peak only, for WEBGPU_SPECULATION_STEPS steps (the steps after the first repeat a step
// LMS has seen).

/** Steps of the WebGPU runs with speculation on. */
const WEBGPU_SPECULATION_STEPS = 4;

describe('runUnderLms on WebGPU', function () {
  this.timeout(120_000);

  for (const shape of [DEEP_MLP, DEEP_TRANSFORMER]) {
    it(`trains a deep ${shape.model} under 50 %, 25 % and 12.5 % of its peak with either policy to the unconstrained run's losses and weights, bit for bit, within the budget`, async function () {
      const { device: gpu } = await deviceOrSkip(this);
      const unconstrained = await runUnderLms({ device: 'webgpu', gpu, ...shape, steps: STEPS });
      expect(unconstrained.pinnedPeakBytes).to.be.at.most(peakOf(unconstrained) / 8);
      for (const divisor of [2, 4, 8]) {
        for (const policy of POLICIES) {
          const budgetBytes = Math.floor(peakOf(unconstrained) / divisor);
          const run = await runUnderLms({ device: 'webgpu', gpu, ...shape, steps: STEPS, budgetBytes, policy });
          const under = `under 1/${divisor} with ${policy}`;
          expectSameTraining(run, unconstrained);
          expect(run.maxReservedBytes, `reserved after an op ${under}`).to.be.at.most(budgetBytes);
          expect(peakOf(run), `peak reserved ${under}`).to.be.at.most(budgetBytes);
          expect(run.stats.page_out, `page-outs ${under}`).to.be.greaterThan(0);
        }
      }
    });

    it(`trains a deep ${shape.model} under 25 % of its peak with speculation on, with lru and with speculative, to the unconstrained run's losses and weights, bit for bit, within the budget`, async function () {
      const { device: gpu } = await deviceOrSkip(this);
      const unconstrained = await runUnderLms({ device: 'webgpu', gpu, ...shape, steps: WEBGPU_SPECULATION_STEPS });
      const budgetBytes = Math.floor(peakOf(unconstrained) / 4);
      for (const policy of ['lru', 'speculative'] as const) {
        const run = await runUnderLms({ device: 'webgpu', gpu, ...shape, steps: WEBGPU_SPECULATION_STEPS, budgetBytes, policy, speculation: true });
        expectSameTraining(run, unconstrained);
        expectWithinBudget(run, budgetBytes, `with ${policy}`);
        expect(run.stats.page_out, `page-outs with ${policy}`).to.be.greaterThan(0);
      }
    });
  }
});

// On CUDA every tensor lives in device memory and moves through the driver, while the ops compute on the host
// (Note [Host compute on CUDA] in cuda/cudaHostOps.ts): with the CPU's arithmetic, a run must give the
// unconstrained CPU run's bits. Without a GPU the driver is the stand-in libcuda, whose copies run on threads of
// its own, so page-outs complete asynchronously as on a GPU. The budgets are fractions of the unconstrained CUDA
// run's peak (reserved bytes round to cuMemAlloc's 256-byte alignment). With speculation on: under a quarter of
// the peak only, for CUDA_SPECULATION_STEPS steps, as on WebGPU.

/** Steps of the CUDA runs with speculation on. */
const CUDA_SPECULATION_STEPS = 4;

describe('runUnderLms on CUDA', function () {
  this.timeout(120_000);

  let libcuda: string;
  before(function () {
    libcuda = libcudaOrSkip(this);
  });

  for (const shape of [DEEP_MLP, DEEP_TRANSFORMER]) {
    describe(`a deep ${shape.model} (${JSON.stringify(shape.sizes)})`, () => {
      let onCpu: LmsRunResult;
      let unconstrained: LmsRunResult;
      before(async () => {
        onCpu = await runUnderLms({ device: 'cpu', ...shape, steps: STEPS });
        unconstrained = await runUnderLms({ device: 'cuda', libcuda, ...shape, steps: STEPS });
      });

      it("trains without a budget to the CPU run's losses and weights, bit for bit, pinning at most an eighth of its peak", () => {
        expectSameTraining(unconstrained, onCpu);
        expect(unconstrained.stats.page_out ?? 0, 'page-outs').to.equal(0);
        expect(unconstrained.pinnedPeakBytes).to.be.greaterThan(0);
        expect(unconstrained.pinnedPeakBytes).to.be.at.most(peakOf(unconstrained) / 8);
      });

      for (const divisor of BUDGET_DIVISORS) {
        for (const policy of POLICIES) {
          it(`trains under ${100 / divisor} % of that peak with ${policy} to the CPU run's losses and weights, bit for bit, paging and within the budget after every op`, async () => {
            const budgetBytes = Math.floor(peakOf(unconstrained) / divisor);
            const run = await runUnderLms({ device: 'cuda', libcuda, ...shape, steps: STEPS, budgetBytes, policy });
            expectSameTraining(run, onCpu);
            expectWithinBudget(run, budgetBytes);
            expect(run.stats.page_out, 'page-outs').to.be.greaterThan(0);
            expect(run.stats.page_in, 'page-ins').to.be.greaterThan(0);
          });
        }
      }

      describe('with speculation on', () => {
        let onCpuLonger: LmsRunResult;
        before(async () => {
          onCpuLonger = await runUnderLms({ device: 'cpu', ...shape, steps: CUDA_SPECULATION_STEPS });
        });

        for (const policy of ['lru', 'speculative'] as const) {
          it(`trains under 25 % of its peak with ${policy} to the CPU run's losses and weights, bit for bit, paging and within the budget after every op`, async () => {
            const budgetBytes = Math.floor(peakOf(unconstrained) / 4);
            const run = await runUnderLms({ device: 'cuda', libcuda, ...shape, steps: CUDA_SPECULATION_STEPS, budgetBytes, policy, speculation: true });
            expectSameTraining(run, onCpuLonger);
            expectWithinBudget(run, budgetBytes);
            expect(run.stats.page_out, 'page-outs').to.be.greaterThan(0);
          });
        }
      });
    });
  }
});
