export type { AllocatorMaker, ContractCheck } from './allocatorContract.js';
export { allocatorContract, patternBytes } from './allocatorContract.js';
export { assertAllocatorInvariants } from './assertAllocatorInvariants.js';
export { describeAllocatorContract } from './describeAllocatorContract.js';
