import {
  addBiasInto,
  addInto,
  layerNormBackwardInto,
  layerNormInto,
  matmulInto,
  mseLossInto,
  reluBackwardInto,
  reluInto,
  scaleInto,
  sgdStepInPlace,
  softmaxBackwardInto,
  softmaxInto,
  sumRowsInto,
} from './hostMath.js';
import type { KernelCall } from './TrainingOps.js';

/**
 * Runs `call` on host arrays: `inputs` and `outputs` in the order of KernelCall's operands (sgdStep writes its
 * first input). The CPU ops pass views of their storages, the CUDA ops host copies of theirs; the arithmetic is
 * hostMath.ts's either way, so both give the same bits.
 */
export function runHostKernel(call: KernelCall, inputs: readonly Float32Array[], outputs: readonly Float32Array[]): void {
  const [a, b, c, d, e] = inputs as Float32Array[];
  const [y, y1, y2] = outputs as Float32Array[];
  switch (call.kernel) {
    case 'matmul':
      return matmulInto(y!, a!, b!, call.m, call.n, call.k, call.transA, call.transB);
    case 'addBias':
      return addBiasInto(y!, a!, b!, call.n);
    case 'add':
      return addInto(y!, a!, b!);
    case 'scale':
      return scaleInto(y!, a!, call.s);
    case 'sumRows':
      return sumRowsInto(y!, a!, call.m, call.n);
    case 'relu':
      return reluInto(y!, a!);
    case 'reluBackward':
      return reluBackwardInto(y!, a!, b!);
    case 'softmax':
      return softmaxInto(y!, a!, call.m, call.n, call.causal);
    case 'softmaxBackward':
      return softmaxBackwardInto(y!, a!, b!, call.m, call.n);
    case 'layerNorm':
      return layerNormInto(y!, y1!, y2!, a!, b!, c!, call.m, call.n, call.eps);
    case 'layerNormBackward':
      return layerNormBackwardInto(y!, y1!, y2!, a!, b!, c!, d!, e!, call.m, call.n);
    case 'mseLoss':
      return mseLossInto(y!, y1!, a!, b!);
    case 'sgdStep':
      return sgdStepInPlace(a!, b!, call.lr);
  }
}
