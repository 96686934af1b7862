import type { ReplayPlan } from './ReplayPlan.js';
import { ALLOC } from './ReplayPlan.js';

/**
 * A model of TensorFlow.js's WebGPU BufferManager as TfjsReplayAllocator drives it (Note [tfjs release at
 * submit]): a buffer is reused only for a request of its exact size, freed buffers return to the free lists at
 * the program's next submit, and none is ever destroyed; so `createBuffer` is called whenever no free buffer of the
 * exact size is waiting. Counts what the real manager counts on the same plan (checked against `pnpm bench:webgpu`
 * on its six traces) without a device.
 */
export class FreeListModel {
  /**
   * `createBuffer` calls the manager makes over `plan`, the program submitting after every free, and the bytes of
   * the buffers they make (tfjs never destroys one).
   */
  static replay(plan: ReplayPlan): { creates: number; createdBytes: number } {
    const waiting = new Map<number, number>();
    const sizeOf = new Float64Array(plan.slots);
    let creates = 0;
    let createdBytes = 0;
    for (let i = 0; i < plan.length; i++) {
      const slot = plan.slot[i]!;
      if (plan.kind[i] === ALLOC) {
        const size = plan.size[i]!;
        const free = waiting.get(size) ?? 0;
        if (free > 0) waiting.set(size, free - 1);
        else {
          creates++;
          createdBytes += size;
        }
        sizeOf[slot] = size;
      } else {
        // Released at the submit that follows this free, before the next allocation.
        const size = sizeOf[slot]!;
        waiting.set(size, (waiting.get(size) ?? 0) + 1);
      }
    }
    return { creates, createdBytes };
  }
}
