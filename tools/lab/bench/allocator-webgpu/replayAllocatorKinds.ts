import type { ReplayAllocatorKind } from './ReplayAllocator.js';
import { RawReplayAllocator } from './RawReplayAllocator.js';
import { StowageReplayAllocator } from './StowageReplayAllocator.js';
import { TfjsReplayAllocator } from './TfjsReplayAllocator.js';

/** The allocators the WebGPU bench compares, Stowage first. */
export function replayAllocatorKinds(): ReplayAllocatorKind[] {
  return [
    { name: 'stowage', steady: true, create: (context) => new StowageReplayAllocator(context) },
    { name: 'tfjs', steady: true, create: (context) => new TfjsReplayAllocator(context) },
    { name: 'raw', create: (context) => new RawReplayAllocator(context) },
  ];
}
