export type { ReclaimNode } from './ReclaimList.js';
export { ReclaimList } from './ReclaimList.js';
