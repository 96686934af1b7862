export type { StandInBuild } from './standIn.js';
export { buildStandIn, STAND_IN_LIBRARY, STAND_IN_SOURCE, StandInHooks } from './standIn.js';
