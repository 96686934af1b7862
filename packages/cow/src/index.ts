export type { CowOptions } from './cow.js';
export { cow, registerCow } from './cow.js';
export { CowContext } from './CowContext.js';
export { cowDeleter, isCowDataPtr } from './cowDeleter.js';
export { CowReshapePolicy } from './CowReshapePolicy.js';
export { lazyClone } from './lazyClone.js';
export type { Materialization } from './materialize.js';
export { materialize } from './materialize.js';
