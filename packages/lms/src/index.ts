// @stowage/lms: the user's API — the lms() plugin, pins, the controller, policies and what they see, LMS's
// per-device and per-storage state, the statistics keys. Internals tests need are in '@stowage/lms/testing'; the
// simulated device and Belady-MIN that measure LMS are in '@stowage/lab'.
export { PageInPendingError } from './errors.js';
export type { LmsOptions } from './lms.js';
export { lms } from './lms.js';
export type { LmsSnapshot } from './LmsAllocator.js';
export { LmsAllocator } from './LmsAllocator.js';
export { LmsController } from './LmsController.js';
export { Residency } from './Residency.js';
export type { LmsEventSource } from './LmsEvents.js';
export type { ReclaimCandidate, ReclaimRequest } from './LmsPolicy.js';
export { LmsPolicy } from './LmsPolicy.js';
export { PAGING_STAT_KEYS, SPECULATION_STAT_KEYS } from './LmsStats.js';
export { StorageResidency } from './StorageResidency.js';
export type { Pinnable } from './pin.js';
export { pin, pinAsync, PinGuard } from './pin.js';
export type { BuiltInPolicyName } from './policies.js';
export { BestFitPolicy, freedRun, LruPolicy, SpeculativePolicy } from './policies.js';
export type { SpeculationOptions } from './speculation/SpeculationOptions.js';
export { Speculation } from './speculation/Speculation.js';
