// @stowage/lms/testing: LMS's internals, for tests and instruments that check them — the runtime's residencies,
// the reclaim list, the learned history, statistics and emitter classes, the policy helpers behind the built-ins.
export { Residencies } from '../Residencies.js';
export type { LmsEvents } from '../LmsEvents.js';
export { LmsEmitter } from '../LmsEvents.js';
export type { AllocSource } from '../LmsStats.js';
export { ALLOC_SOURCES, LmsStats } from '../LmsStats.js';
export { BUILT_IN_POLICIES, smallestAdjacentRun } from '../policies.js';
export type { SpeculationSettings } from '../speculation/SpeculationOptions.js';
export { resolveSpeculation } from '../speculation/SpeculationOptions.js';
export type { LearnedStorage } from '../speculation/AccessHistory.js';
export { AccessHistory } from '../speculation/AccessHistory.js';
export type { RecordedStorage } from '../speculation/AccessRecording.js';
export { AccessKind, AccessRecording } from '../speculation/AccessRecording.js';
export type { ReclaimNode } from '../ReclaimList.js';
export { ReclaimList } from '../ReclaimList.js';
