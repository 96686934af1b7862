import type { LmsStorage } from '@stowage/core';
import { InvalidArgumentError, isOutOfMemoryError, StorageImpl, TensorImpl, UseAfterReleaseError } from '@stowage/core';
import type { Residency } from './Residency.js';
import { StorageResidency } from './StorageResidency.js';

/** What a guard pins: a storage, or a tensor (which pins its storage). */
export type Pinnable = StorageImpl | TensorImpl;

/**
 * The pins of one operation: disposing the guard (the end of a `using` block, or `release()`) unpins every storage
 * it pinned, once. Storages without an LMS object (LMS off, an allocator that cannot page) are not counted.
 */
export class PinGuard implements Disposable {
  #pinned: LmsStorage[] | null;
  /** The storages this guard made active, in the order the caller gave them (Note [Pins in the caller's order]). */
  readonly #madeActive: readonly StorageResidency[];

  /**
   * @internal made by `pin` and `pinAsync` with the LMS objects they pinned, in pin order, and those they made
   * active, in the caller's order
   */
  constructor(pinned: LmsStorage[], madeActive: readonly StorageResidency[] = []) {
    this.#pinned = pinned;
    this.#madeActive = madeActive;
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
    let madeInactive: StorageResidency[] | undefined;
    for (let i = pinned.length - 1; i >= 0; i--) {
      const lms = pinned[i]!;
      try {
        if (!(lms instanceof StorageResidency)) lms.unpin();
        else if (lms.unpinUnrecorded() && lms.lmsDevice.learner !== null) (madeInactive ??= []).push(lms);
      } catch (error) {
        errors.push(error); // every pin still ends; the first failure is reported after
      }
    }
    try {
      if (madeInactive !== undefined) tellUnpins(this.#madeActive, madeInactive);
    } catch (error) {
      errors.push(error);
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
  const madeActive: StorageResidency[] = [];
  try {
    for (const lms of objects) if (lms.state !== 'reclaimed') pinOne(lms, pinned, madeActive);
    for (const lms of reclaimed) pinOne(lms, pinned, madeActive);
  } catch (error) {
    new PinGuard(pinned).release();
    throw error;
  }
  return guardTellingPins(objects, pinned, madeActive);
}

/**
 * As `pin`, but waits for reclaimed storages whose bytes are still on their way to host memory (WebGPU) instead of
 * throwing: for callers that can await. On a device whose page-outs hold device memory until they land, it waits
 * for page-outs in flight only when the room they hold is needed: before its pins, for the pins' page-ins and the
 * bytes the program is expected to allocate before its next pin, and again after them (Note [Waiting for
 * page-outs] in Residency.ts); a pin that runs out of memory while page-outs are in flight is tried again once the
 * oldest landed (Note [Page-outs the device refuses]). While page-outs are in flight it lets the event loop turn
 * now and then, so that copies done on the device land before the pins that need them. Same errors otherwise;
 * nothing stays pinned when it rejects.
 */
export async function pinAsync(...items: Pinnable[]): Promise<PinGuard> {
  const objects = lmsObjects(items);
  const residencies = new Map<Residency, number>(); // each device's bytes to page in
  for (const lms of objects) {
    if (!(lms instanceof StorageResidency)) continue;
    const device = lms.lmsDevice;
    if (!residencies.has(device)) device.pinAsyncBegins();
    residencies.set(device, (residencies.get(device) ?? 0) + (lms.state === 'reclaimed' ? lms.byteLength : 0));
  }
  for (const device of residencies.keys()) await device.pollPageOuts();
  const reclaimed = objects.filter((lms) => lms.state === 'reclaimed'); // once per item, as in `pin`
  // Note [Ready before use] in LmsStats.ts: reclaimed storages whose bytes are not on the host yet, as the pin comes.
  const late = new Set(reclaimed.filter((lms) => lms instanceof StorageResidency && !lms.hostCopyReady));
  for (const [device, pageInBytes] of residencies) await device.waitForRoom(pageInBytes + device.expectedAllocationBytes());
  const pinned: LmsStorage[] = [];
  const madeActive: StorageResidency[] = [];
  try {
    for (const lms of objects) if (lms.state !== 'reclaimed') pinOne(lms, pinned, madeActive);
    for (const lms of reclaimed) {
      await lms.ready(); // at once when an access brought it back meanwhile
      for (;;) {
        try {
          pinOne(lms, pinned, madeActive, late.has(lms));
          break;
        } catch (error) {
          // The room may be in staging buffers of page-outs in flight: it comes back as they land.
          if (!isOutOfMemoryError(error) || !(lms instanceof StorageResidency) || lms.lmsDevice.pageOutsInFlight === 0) throw error;
          await lms.lmsDevice.waitForOldestPageOut();
        }
      }
    }
    // The page-ins' reclaims may have started page-outs: the caller's allocations next (synchronous) must fit.
    for (const device of residencies.keys()) await device.waitForRoom(device.expectedAllocationBytes());
  } catch (error) {
    new PinGuard(pinned).release();
    throw error;
  }
  return guardTellingPins(objects, pinned, madeActive);
}

// Note [Pins in the caller's order]: `pin` pins resident storages before reclaimed ones, so the order in which an
// operation's storages become active depends on what LMS reclaimed, and would differ from one iteration to the
// next. LMS learns the program's sequence (Note [Speculation]), so a guard tells it of the pins it made in the order
// the caller gave the storages, once all are pinned, and of its unpins in the reverse of that order, once all are
// unpinned. A guard that fails to pin everything tells nothing: it unpins what it pinned, unrecorded.

/**
 * Pins `lms`; one that this pin made active, on a device that learns, joins `madeActive`. `late`: its bytes were
 * not on the host when the pin was asked for (Note [Ready before use] in LmsStats.ts).
 */
function pinOne(lms: LmsStorage, pinned: LmsStorage[], madeActive: StorageResidency[], late = false): void {
  if (!(lms instanceof StorageResidency)) lms.pin();
  else if (lms.pinUnrecorded(late) && lms.lmsDevice.learner !== null) madeActive.push(lms);
  pinned.push(lms);
}

/** The guard of pins made; their learners hear of those that made a storage active, in the caller's order. */
function guardTellingPins(objects: readonly LmsStorage[], pinned: LmsStorage[], madeActive: readonly StorageResidency[]): PinGuard {
  if (madeActive.length === 0) return new PinGuard(pinned);
  const inOrder: StorageResidency[] = [];
  for (const lms of objects) {
    if (lms instanceof StorageResidency && madeActive.includes(lms) && !inOrder.includes(lms)) inOrder.push(lms);
  }
  const guard = new PinGuard(pinned, inOrder);
  try {
    for (const lms of inOrder) lms.lmsDevice.learner?.onPin(lms);
  } catch (error) {
    guard.release(); // a prefetch failed in a way that is not "no room": nothing stays pinned
    throw error;
  }
  return guard;
}

/** Tells the learners of the unpins that made storages inactive: the reverse of the caller's order, then any others. */
function tellUnpins(madeActive: readonly StorageResidency[], madeInactive: StorageResidency[]): void {
  for (let i = madeActive.length - 1; i >= 0; i--) {
    const lms = madeActive[i]!;
    const at = madeInactive.indexOf(lms);
    if (at < 0) continue;
    madeInactive.splice(at, 1);
    lms.lmsDevice.learner?.onUnpin(lms);
  }
  for (const lms of madeInactive) lms.lmsDevice.learner?.onUnpin(lms);
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
