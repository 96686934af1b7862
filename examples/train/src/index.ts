export { BudgetExceededError } from './BudgetExceededError.js';
export type { CpuOpsOptions } from './cpuOps.js';
export { createCpuOps } from './cpuOps.js';
export type { WebGpuOpsOptions } from './webgpu/webGpuOps.js';
export { createWebGpuOps } from './webgpu/webGpuOps.js';
export type { CudaHostOpsOptions } from './cuda/cudaHostOps.js';
export { createCudaHostOps } from './cuda/cudaHostOps.js';
export type { LmsRunModel, LmsRunOptions, LmsRunResult, LmsRunSettings, StepStatKey } from './lmsRun.js';
export { runUnderLms, STEP_STAT_KEYS, unconstrainedPeak } from './lmsRun.js';
export type { MlpSizes, Model, ModelName, ModelOptions, Parameter, TransformerSizes } from './models.js';
export { createModel, DEFAULT_MLP_SIZES, DEFAULT_TRANSFORMER_SIZES, MODEL_NAMES } from './models.js';
export { mulberry32, uniformArray } from './mulberry32.js';
export { noPin } from './noPin.js';
export type { Ops, PinScope, Tensor } from './Ops.js';
export { StepTensors } from './StepTensors.js';
export type { TrainOptions, TrainResult } from './train.js';
export { DEFAULT_LEARNING_RATES, train } from './train.js';
export type { ComputeModel, SimIteration, SimRunOptions, SimRunResult, SimStatKey } from './simRun.js';
export { figuresAgainst, H100_COMPUTE, hiddenShare, kernelDurationNs, runTraceOnSim, SIM_STAT_KEYS } from './simRun.js';
export type {
  BuiltIteration,
  IterationTrace,
  MlpTraceShapes,
  ModelTrace,
  OpUses,
  TraceName,
  TraceOp,
  TraceTensor,
  TransformerTraceShapes,
  TransformerVaryingTraceShapes,
  UnetTraceShapes,
} from './traces/index.js';
// The trace generators' layer kit, for generators of other models (tools/lab's published setups).
export { add, attentionScores, attentionValues, concat, gelu, linear, loss, norm, relu, softmax, Tape, weighted } from './traces/index.js';
export {
  DEFAULT_MLP_TRACE_SHAPES,
  DEFAULT_OPTIMIZER_TRACE_SHAPES,
  DEFAULT_TRANSFORMER_TRACE_SHAPES,
  DEFAULT_TRANSFORMER_VARYING_TRACE_SHAPES,
  DEFAULT_UNET_TRACE_SHAPES,
  maxOpWorkingSet,
  mlpTrace,
  optimizerTrace,
  peakLiveBytes,
  toOfflineTrace,
  TraceBuilder,
  TRACES,
  transformerTrace,
  transformerVaryingTrace,
  unetTrace,
} from './traces/index.js';
