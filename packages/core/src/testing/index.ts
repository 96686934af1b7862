export type { AllocatorMaker, ContractCheck } from './allocatorContract.js';
export { allocatorContract, patternBytes } from './allocatorContract.js';
export { assertAllocatorInvariants } from './assertAllocatorInvariants.js';
export { describeAllocatorContract } from './describeAllocatorContract.js';
export type { VirtualMemoryBackendOptions } from './VirtualMemoryBackend.js';
export { VirtualMemoryBackend } from './VirtualMemoryBackend.js';
export { expectTypedOrSuccess, junk, junkArgs } from './junk.js';
export type { AdaptorCase } from './adaptorCases.js';
export { adaptorCases } from './adaptorCases.js';
