import { mlpTrace } from './mlpTrace.js';
import { optimizerTrace } from './optimizerTrace.js';
import type { ModelTrace } from './Trace.js';
import { transformerTrace, transformerVaryingTrace } from './transformerTrace.js';
import { unetTrace } from './unetTrace.js';

export { add, attentionScores, attentionValues, concat, gelu, linear, loss, norm, relu, softmax, weighted } from './layers.js';
export { maxOpWorkingSet } from './maxOpWorkingSet.js';
export type { MlpTraceShapes } from './mlpTrace.js';
export { DEFAULT_MLP_TRACE_SHAPES, mlpTrace } from './mlpTrace.js';
export { DEFAULT_OPTIMIZER_TRACE_SHAPES, optimizerTrace } from './optimizerTrace.js';
export { peakLiveBytes } from './peakLiveBytes.js';
export type { IterationTrace, ModelTrace, TraceOp, TraceTensor } from './Trace.js';
export { toOfflineTrace } from './toOfflineTrace.js';
export type { BuiltIteration, OpUses } from './TraceBuilder.js';
export { Tape } from './Tape.js';
export { TraceBuilder } from './TraceBuilder.js';
export type { TransformerTraceShapes, TransformerVaryingTraceShapes } from './transformerTrace.js';
export { DEFAULT_TRANSFORMER_TRACE_SHAPES, DEFAULT_TRANSFORMER_VARYING_TRACE_SHAPES, transformerTrace, transformerVaryingTrace } from './transformerTrace.js';
export type { UnetTraceShapes } from './unetTrace.js';
export { DEFAULT_UNET_TRACE_SHAPES, unetTrace } from './unetTrace.js';

export type TraceName = 'mlp' | 'transformer' | 'unet' | 'transformer-varying' | 'optimizer';

/** The trace suite T1–T5 of lms-anchors §7, by `ModelTrace.name`, each generated with its default shapes. */
export const TRACES: Readonly<Record<TraceName, () => ModelTrace>> = Object.freeze({
  mlp: () => mlpTrace(),
  transformer: () => transformerTrace(),
  unet: () => unetTrace(),
  'transformer-varying': () => transformerVaryingTrace(),
  optimizer: () => optimizerTrace(),
});
