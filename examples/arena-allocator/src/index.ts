export type { ArenaAllocatorOptions } from './ArenaAllocator.js';
export { createArenaAllocator } from './ArenaAllocator.js';
export { arena, registerArenaAllocator } from './arena.js';
