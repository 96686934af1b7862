import type { ComputeModel, ModelTrace } from '@stowage/example-train';
import type { LinkName } from '@stowage/lab';
import { LINK_PROFILES } from '@stowage/lab';
import { bertTrace, gpt2Trace, resnet50Trace, unet3dTrace, vgg16Trace } from './models.js';

// The published swapping systems' own setups (issue 33): each paper's GPU (its memory, its published peak compute
// times an achieved fraction stated here, its memory bandwidth at 80 %, the roofline of example-train's Note
// [Compute model]), its host link, its model at its size, and the figure it published. The bench's README
// (tools/lab/README.md, "The published setups") cites each figure; every figure the bench prints is simulated.

const GiB = 2 ** 30;

/** A GPU as the roofline sees it. */
export interface DeviceProfile {
  readonly gpu: string;
  /** The device memory, the budget LMS runs under: the nominal capacity (16 GB is 16 GiB of HBM2). */
  readonly memoryBytes: number;
  readonly link: LinkName;
  /** Published peak FLOP/s for the precision the setup trains in. */
  readonly peakFlopsPerSecond: number;
  /** The share of the peak a large kernel achieves (a stated assumption). */
  readonly achievedFraction: number;
  /** Published memory bandwidth, bytes/s; kernels reach 80 % of it (example-train's Note [Compute model]). */
  readonly peakMemoryBytesPerSecond: number;
}

/** fp32 convolution and GEMM kernels of cuDNN/cuBLAS reach about 60 % of peak on these GPUs: the fraction taken. */
const FP32_ACHIEVED = 0.6;
const MEMORY_ACHIEVED = 0.8;

export const DEVICES = Object.freeze({
  /** TFLMS: IBM AC922, V100 SXM2 16 GB (15.7 TFLOP/s fp32, 900 GB/s HBM2), NVLink 2.0 to POWER9. */
  'v100-16gb-nvlink2': { gpu: 'V100 SXM2 16 GB', memoryBytes: 16 * GiB, link: 'nvlink2', peakFlopsPerSecond: 15.7e12, achievedFraction: FP32_ACHIEVED, peakMemoryBytesPerSecond: 900e9 },
  /** The out-of-core system: a 16 GB V100 over PCIe 3 (the GPU and link are assumptions: not retrieved from the paper). */
  'v100-16gb-pcie3': { gpu: 'V100 PCIe 16 GB', memoryBytes: 16 * GiB, link: 'pcie3', peakFlopsPerSecond: 14e12, achievedFraction: FP32_ACHIEVED, peakMemoryBytesPerSecond: 900e9 },
  /** vDNN: GeForce GTX Titan X (Maxwell) 12 GB, 6.6 TFLOP/s fp32 at boost, 336.5 GB/s GDDR5, PCIe 3. */
  'titanx-12gb-pcie3': { gpu: 'Titan X (Maxwell) 12 GB', memoryBytes: 12 * GiB, link: 'pcie3', peakFlopsPerSecond: 6.6e12, achievedFraction: FP32_ACHIEVED, peakMemoryBytesPerSecond: 336.5e9 },
  /** Capuchin: Tesla P100 PCIe 16 GB, 9.3 TFLOP/s fp32, 732 GB/s HBM2, PCIe 3 (from memory of the paper, not retrieved). */
  'p100-16gb-pcie3': { gpu: 'P100 PCIe 16 GB', memoryBytes: 16 * GiB, link: 'pcie3', peakFlopsPerSecond: 9.3e12, achievedFraction: FP32_ACHIEVED, peakMemoryBytesPerSecond: 732e9 },
  /**
   * ZeRO-Offload's single GPU: a V100 32 GB (DGX-2) over PCIe 3, mixed precision on tensor cores: 125 TFLOP/s
   * fp16 peak at 0.32, the 40 TFLOP/s ZeRO-Offload reports per V100.
   */
  'v100-32gb-pcie3': { gpu: 'V100 SXM3 32 GB', memoryBytes: 32 * GiB, link: 'pcie3', peakFlopsPerSecond: 125e12, achievedFraction: 0.32, peakMemoryBytesPerSecond: 900e9 },
} satisfies Record<string, DeviceProfile>);

export type DeviceName = keyof typeof DEVICES;

export function computeModelOf(device: DeviceProfile): ComputeModel {
  return { flopsPerSecond: device.peakFlopsPerSecond * device.achievedFraction, memoryBytesPerSecond: device.peakMemoryBytesPerSecond * MEMORY_ACHIEVED };
}

/** What the setup's search varies: the batch, or (3D U-Net) the volume's edge in steps of `step`. */
export interface Knob {
  readonly name: 'batch' | 'size';
  /** The trace at knob value `value` (a positive integer, a multiple of `step`). */
  make(value: number): ModelTrace;
  readonly step: number;
  /** Samples per iteration at `value` (throughput = samples / iteration time). */
  samples(value: number): number;
  /** What one unit of the knob scales: voxels (size³) for a resolution, the batch itself. */
  scale(value: number): number;
}

/** The paper's figure and how ours is read against it. */
export interface PaperFigure {
  readonly paper: string;
  /** The published figure, as the paper states it (README cites it). */
  readonly statement: string;
}

export interface PublishedSetup {
  readonly name: string;
  readonly device: DeviceName;
  readonly knob: Knob;
  /** The knob value the paper ran (its batch or size), where it names one; else the search's result is the operating point. */
  readonly paperValue: number | null;
  readonly figure: PaperFigure;
  /** The targets the paper's figure sets, read from the bench's measurements (published.bench.ts). */
  readonly targets: readonly PaperTarget[];
}

/** One target: a figure of ours, the paper's, and which way is better. */
export interface PaperTarget {
  readonly name: string;
  /** Which measurement: see published.bench.ts `SetupFigures`. */
  readonly figure: 'multipleOfFreeMax' | 'footprintReduction' | 'fitsAtPaperValue' | 'throughputVsUnconstrained' | 'slowdown' | 'tflops';
  readonly paper: number | boolean;
  /** 'atLeast': ours ≥ paper is met; 'atMost': ours ≤ paper. */
  readonly sense: 'atLeast' | 'atMost' | 'equals';
}

const batchKnob = (make: (batch: number) => ModelTrace, samplesPerBatch = 1): Knob => ({
  name: 'batch',
  make,
  step: 1,
  samples: (b) => b * samplesPerBatch,
  scale: (b) => b,
});

export const PUBLISHED_SETUPS: readonly PublishedSetup[] = Object.freeze([
  {
    name: 'resnet50-tflms',
    device: 'v100-16gb-nvlink2',
    knob: batchKnob((batch) => resnet50Trace({ batch })),
    paperValue: null,
    figure: { paper: 'TFLMS (Le et al., arXiv:1807.02037; ISMM 2019)', statement: 'ResNet-50 trains at 4.7× (v1) to 4.9× (v2) the largest batch that fits without LMS, on a 16 GB V100 over NVLink 2.0' },
    targets: [{ name: 'batchMultiple', figure: 'multipleOfFreeMax', paper: 4.9, sense: 'atLeast' }],
  },
  {
    name: 'resnet50-out-of-core',
    device: 'v100-16gb-pcie3',
    knob: batchKnob((batch) => resnet50Trace({ batch })),
    paperValue: 1440,
    figure: { paper: 'Out-of-core training with adaptive window-based scheduling (Hayakawa & Narihira, arXiv:2010.14109)', statement: 'ResNet-50 at batch 1,440, 7.5× the upper bound of physical memory, at 55 % of ideal training speed' },
    targets: [
      { name: 'fitsAtBatch1440', figure: 'fitsAtPaperValue', paper: true, sense: 'equals' },
      { name: 'speedVsIdeal', figure: 'throughputVsUnconstrained', paper: 0.55, sense: 'atLeast' },
    ],
  },
  {
    name: 'unet3d-tflms',
    device: 'v100-16gb-nvlink2',
    knob: { name: 'size', make: (size) => unet3dTrace({ batch: 1, size }), step: 16, samples: () => 1, scale: (size) => size ** 3 },
    paperValue: null,
    figure: { paper: 'TFLMS (ISMM 2019; IBM, "Large data flow graphs in limited GPU memory")', statement: '3D U-Net at 5.6× the image resolution without LMS; batch 4 of 192³ volumes on a 16 GB V100' },
    targets: [{ name: 'resolutionMultiple', figure: 'multipleOfFreeMax', paper: 5.6, sense: 'atLeast' }],
  },
  {
    name: 'unet3d-192-batch4',
    device: 'v100-16gb-nvlink2',
    knob: batchKnob((batch) => unet3dTrace({ batch, size: 192 })),
    paperValue: 4,
    figure: { paper: 'TFLMS (IBM, "Large data flow graphs in limited GPU memory")', statement: '3D U-Net trains on whole 192³ volumes at batch 4 on a 16 GB V100' },
    targets: [{ name: 'fitsAtBatch4', figure: 'fitsAtPaperValue', paper: true, sense: 'equals' }],
  },
  {
    name: 'vgg16-vdnn',
    device: 'titanx-12gb-pcie3',
    knob: batchKnob((batch) => vgg16Trace({ batch })),
    paperValue: 256,
    figure: { paper: 'vDNN (Rhu et al., MICRO 2016)', statement: 'VGG-16 at batch 256 (28 GB of tensors) on a 12 GB Titan X over PCIe 3, 18 % slower than an oracle GPU with enough memory' },
    targets: [
      { name: 'fitsAtBatch256', figure: 'fitsAtPaperValue', paper: true, sense: 'equals' },
      { name: 'slowdownVsOracle', figure: 'slowdown', paper: 1.18, sense: 'atMost' },
    ],
  },
  {
    name: 'bert-large-capuchin',
    device: 'p100-16gb-pcie3',
    knob: batchKnob((batch) => bertTrace({ batch })),
    paperValue: null,
    figure: { paper: 'Capuchin (Peng et al., ASPLOS 2020)', statement: "BERT's largest batch 7× TensorFlow's; memory footprint reduced by up to 85 %" },
    targets: [
      { name: 'batchMultiple', figure: 'multipleOfFreeMax', paper: 7, sense: 'atLeast' },
      { name: 'footprintReduction', figure: 'footprintReduction', paper: 0.85, sense: 'atLeast' },
    ],
  },
  {
    name: 'gpt2-1.5b-adam',
    device: 'v100-32gb-pcie3',
    knob: batchKnob((batch) => gpt2Trace({ batch })),
    paperValue: null,
    figure: {
      paper: 'ZeRO-Offload (Ren et al., USENIX ATC 2021)',
      statement: "PyTorch's largest model on one 32 GB V100 is 1.4B parameters, at 30 TFLOP/s; ZeRO-Offload trains 13B (10×) and reaches 40 TFLOP/s at 10B",
    },
    targets: [{ name: 'tflopsAtLeastPytorchAt1_4B', figure: 'tflops', paper: 30, sense: 'atLeast' }],
  },
]);

/** Bytes per second of the setup's link, per direction. */
export function linkOf(setup: PublishedSetup): (typeof LINK_PROFILES)[LinkName] {
  return LINK_PROFILES[DEVICES[setup.device].link];
}
