import type { StorageQueue } from '@stowage/ipc';

/** Gets `count` storages from `queue` and releases each: their first bytes, in the order they came. */
export async function drainQueue(queue: StorageQueue, count: number): Promise<number[]> {
  const first: number[] = [];
  for (let i = 0; i < count; i++) {
    using r = await queue.get();
    first.push(r.bytes()[0]!);
  }
  return first;
}
