export type { BuildStandInOptions, StandInBuild } from './standIn.js';
export {
  buildStandIn,
  cudaIncludeDir,
  STAND_IN_ABI_CHECK_SOURCE,
  STAND_IN_FALLBACK_HEADER,
  STAND_IN_FALLBACK_LIBRARY,
  STAND_IN_LIBRARY,
  STAND_IN_SOURCE,
  StandInHooks,
  standInAbiFacts,
} from './standIn.js';
export type { TestLibcuda } from './testLibcuda.js';
export { testLibcuda } from './testLibcuda.js';
