// @stowage/lab/tfjs/node: what tfjs runs in Node need beyond @stowage/lab/tfjs (it imports esbuild and Node's
// modules, so it stays out of that browser-safe entry): tfjs's gradients and the real models' loader.
export { loadRealModel } from './loadRealModel.js';
export { registerTfjsGradients } from './tfjsGradients.js';
