// @stowage/lab/tfjs: TensorFlow.js models and runs that measure @stowage/tfjs-webgpu against stock tfjs (its tests,
// its browser check and `pnpm bench:tfjs` share them). It bundles for a browser; registerTfjsGradients, Node only,
// is in @stowage/lab/tfjs/node.
export { budgetAt } from './budgetAt.js';
export { DeviceMemoryCounter } from '../browser/DeviceMemoryCounter.js';
export type { LmsRun, StockRun, WorkingSet } from './lmsRuns.js';
export { inStepWorkingSet, isSameRun, runStock, runUnderLms, smallestLmsBudget } from './lmsRuns.js';
export type { RealBackend, RealFloor, RealRun } from './realLmsRuns.js';
export type { AlternatingTimes } from './realLmsRuns.js';
export { alternatingTimes, REAL_PAGING_RESERVE, realFloor, runReal, runsLike, sameBits } from './realLmsRuns.js';
export type { Model, ModelRun } from './models.js';
export { convNet, mlp, MODELS, runModel, transformerBlock } from './models.js';
export type { BackendKind } from './onBackend.js';
export { onBackend } from './onBackend.js';
export type { GraphModelLike, RealModel, RealModelRun } from './realModels.js';
export { predictRealModel, REAL_MODELS, realModel, realModelInput } from './realModels.js';
export { TFJS_LIMITS } from './tfjsLimits.js';
