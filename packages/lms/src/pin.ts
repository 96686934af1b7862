import type { LmsStorage } from '@stowage/core';
import { InvalidArgumentError, StorageImpl, TensorImpl, UseAfterReleaseError } from '@stowage/core';

/** What a guard pins: a storage, or a tensor (which pins its storage). */
export type Pinnable = StorageImpl | TensorImpl;

/**
 * The pins of one operation: disposing the guard (the end of a `using` block, or `release()`) unpins every storage
 * it pinned, once. Storages without an LMS object (LMS off, an allocator that cannot page) are not counted.
 */
export class PinGuard implements Disposable {
  #pinned: LmsStorage[] | null;

  /** @internal made by `pin` and `pinAsync` with the LMS objects they pinned */
  constructor(pinned: LmsStorage[]) {
    this.#pinned = pinned;
  }

  /** True until the guard is released. */
  get isHeld(): boolean {
    return this.#pinned !== null;
  }

  /** Unpins everything this guard pinned, ahead of the end of its scope. Idempotent. */
  release(): void {
    const pinned = this.#pinned;
    if (pinned === null) return;
    this.#pinned = null;
    const errors: unknown[] = [];
    for (let i = pinned.length - 1; i >= 0; i--) {
      try {
        pinned[i]!.unpin();
      } catch (error) {
        errors.push(error); // every pin still ends; the first failure is reported after
      }
    }
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1) throw new AggregateError(errors, `${errors.length} unpins failed; every storage of the guard was unpinned anyway.`);
  }

  [Symbol.dispose](): void {
    this.release();
  }
}

/**
 * Pins the storages of one operation for its scope: `using guard = pin(a, b, out)`. Resident storages are pinned
 * first, so that bringing back a reclaimed one never reclaims another input of the same operation. Pins nest: a
 * storage given twice, or pinned by an outer guard too, is unpinned once per pin.
 * @throws InvalidArgumentError for an item that is not a StorageImpl or TensorImpl; UseAfterReleaseError for a
 * released storage; PageInPendingError when a reclaimed storage's bytes are still on their way to the host (use
 * `pinAsync`); OutOfMemoryError when the storages do not fit together. Nothing stays pinned when it throws.
 */
export function pin(...items: Pinnable[]): PinGuard {
  const objects = lmsObjects(items);
  const reclaimed = objects.filter((lms) => lms.state === 'reclaimed'); // once per item: a storage given twice is pinned twice
  const pinned: LmsStorage[] = [];
  try {
    for (const lms of objects) if (lms.state !== 'reclaimed') pinOne(lms, pinned);
    for (const lms of reclaimed) pinOne(lms, pinned);
  } catch (error) {
    new PinGuard(pinned).release();
    throw error;
  }
  return new PinGuard(pinned);
}

/**
 * As `pin`, but waits for reclaimed storages whose bytes are still on their way to host memory (WebGPU) instead of
 * throwing: for callers that can await. Same errors otherwise; nothing stays pinned when it rejects.
 */
export async function pinAsync(...items: Pinnable[]): Promise<PinGuard> {
  const objects = lmsObjects(items);
  const reclaimed = objects.filter((lms) => lms.state === 'reclaimed'); // once per item, as in `pin`
  const pinned: LmsStorage[] = [];
  try {
    for (const lms of objects) if (lms.state !== 'reclaimed') pinOne(lms, pinned);
    for (const lms of reclaimed) {
      await lms.ready(); // at once when an access brought it back meanwhile
      pinOne(lms, pinned);
    }
  } catch (error) {
    new PinGuard(pinned).release();
    throw error;
  }
  return new PinGuard(pinned);
}

function pinOne(lms: LmsStorage, pinned: LmsStorage[]): void {
  lms.pin();
  pinned.push(lms);
}

/** The LMS objects of the items' storages, in order (one per item; storages without one left out). */
function lmsObjects(items: readonly Pinnable[]): LmsStorage[] {
  const objects: LmsStorage[] = [];
  for (const [i, item] of items.entries()) {
    const storage = item instanceof TensorImpl ? item.storage : item;
    if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError(`items[${i}]`, item, 'a StorageImpl or TensorImpl to pin');
    if (storage.isReleased) throw new UseAfterReleaseError(`Cannot pin items[${i}]: its ${storage.byteLength}-byte storage was released.`);
    if (storage.lms !== null) objects.push(storage.lms);
  }
  return objects;
}
