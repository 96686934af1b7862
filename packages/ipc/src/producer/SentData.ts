import type { DataPtr, Device } from '@stowage/core';
import type { Deleter } from '@stowage/core/plugin-kit';

import type { CounterSlot } from '../refcount/CounterSlot.js';

/**
 * What the producer's side keeps for an allocation it has sent (PyTorch's `CudaIPCSentData`): the deleter and
 * context it displaced on the DataPtr, and one counter slot per send. Its owner decides, when the producer's
 * storage is released, whether the allocation is freed at once or waits in the limbo.
 *
 * Invariants: `slots` holds the sends not yet finished, in send order (a send appends; the oldest with a count back
 * at 0 are finished and removed at the next send); once `released`, the allocation is either in the owner's limbo
 * or freed (`freed`), never both.
 */
export interface SentData {
  readonly owner: SentDataOwner;
  readonly device: Device;
  readonly byteLength: number;
  readonly ptr: DataPtr;
  readonly originalDeleter: Deleter | null;
  readonly originalContext: unknown;
  /** One slot per send not yet finished, in send order. */
  readonly slots: CounterSlot[];
  /** The producer released its storage (the DataPtr's deleter ran). */
  released: boolean;
  /** The original deleter ran. */
  freed: boolean;
}

/** The service a {@link SentData} reports to when the producer's DataPtr is released. */
export interface SentDataOwner {
  producerReleased(sent: SentData): void;
}

/**
 * The deleter of every sent DataPtr: hands the sent data to its owner, which frees the allocation when no
 * consumer holds it and otherwise moves it to the limbo.
 */
export const sentDeleter: Deleter = (context) => {
  const sent = context as SentData;
  sent.owner.producerReleased(sent);
};

/** True when `ptr` was sent through IPC (its producer's deleter was taken over). */
export function isSentDataPtr(ptr: DataPtr): boolean {
  return ptr.deleter === sentDeleter;
}
