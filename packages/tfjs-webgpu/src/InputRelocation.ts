import { isOutOfMemoryError, StorageImpl } from '@stowage/core';
import { StorageResidency } from '@stowage/lms';

/** A dirty input moved out of its block: its bytes wait in `parked` until the kernel's output has its block. */
interface Moved {
  readonly data: { resource?: unknown };
  readonly byteLength: number;
  readonly parked: GPUBuffer;
}

/** What the relocation needs of the Stowage backend. */
export interface RelocationHost {
  /** The GPUDevice itself. */
  device(): GPUDevice;
  /** The command encoder, ready, outside any compute pass. */
  encoder(): GPUCommandEncoder;
  /** Submits what was recorded (the pins of recorded kernels end; frees complete). */
  submitNow(): void;
  /** The range of a storage in its segment. */
  bindingOf(storage: StorageImpl): { buffer: GPUBuffer; offset: number };
  /** A new tensor storage (under LMS, room made first). */
  acquireStorage(byteLength: number): StorageImpl;
  releaseStorage(storage: StorageImpl): void;
  /** Whether the backend made `storage` (a caller's buffer is never moved). */
  owns(storage: StorageImpl): boolean;
  /** Ends the pins of the kernel being run (its inputs). */
  unpinKernel(): void;
  /** Pins `storages` for the kernel being run (bringing reclaimed ones back). */
  pinKernel(storages: readonly StorageImpl[]): void;
}

/**
 * Note [Moving dirty inputs out of the output's way]: a kernel's output may find no free run although the
 * kernel's pinned inputs and the output fit the budget together: a small input sits in the middle of the one
 * segment large enough for the output (lightning's and faceres's second predictions at 1.25 x their floor: a
 * 576 KiB input inside the 3.5 MiB segment a 3.38 MiB output needs, where the budget has no room for a second
 * segment of that size). So the kernel's pins end and the output is tried once more. A clean input LMS moves by
 * itself then (a reclaim frees its block, the page-in when it is pinned again places it after the output); a
 * dirty one, written in this synchronous step, cannot leave for the host, so the backend moves it on the device:
 * its bytes are copied to a buffer of their own (a createBuffer outside the budget for the moment, within its
 * allowance of max(1 MiB, 2 %)), its storage is released, and once the output has its block the input gets a new
 * storage (the engine places it after the output) and its bytes are copied back; the buffer is destroyed at the
 * next submit. The tensor keeps its bits; tfjs sees a new resource for its data id.
 */
export class InputRelocation {
  #moved: Moved[] = [];
  /** Buffers whose bytes went back to a storage: destroyed after the submit that runs the copies. */
  #toDestroy: GPUBuffer[] = [];

  constructor(private readonly host: RelocationHost) {}

  /**
   * Runs `allocate` (a kernel's output and page-ins, each pinned). When that throws OutOfMemoryError, the kernel's
   * pins end (its clean inputs may be reclaimed now), its dirty inputs among `tensors` (the kernel's inputs and
   * output; at most `maxBytes` of them) move out of the way, and `allocate` runs once more; then the moved inputs
   * get new storages and every storage of `tensors` is pinned again (reclaimed ones come back after the others).
   * @throws what the second try throws
   */
  allocateKernel(allocate: () => void, tensors: readonly { resource?: unknown }[], maxBytes: number): void {
    try {
      allocate();
      return;
    } catch (error) {
      if (!isOutOfMemoryError(error)) throw error;
      this.host.unpinKernel(); // clean inputs may be reclaimed now, dirty ones moved
      this.host.submitNow();
      this.moveOut(tensors, maxBytes);
    }
    try {
      allocate();
    } finally {
      this.moveBack();
      const storages = new Set<StorageImpl>();
      for (const data of tensors) if (data.resource instanceof StorageImpl && data.resource.lms !== null) storages.add(data.resource);
      this.host.pinKernel([...storages]);
    }
  }

  /**
   * Moves the dirty, resident inputs among `datas` (unpinned) out of their blocks, at most `maxBytes` in all;
   * returns false (nothing moved) when there is none or they are more.
   */
  moveOut(datas: readonly { resource?: unknown }[], maxBytes: number): boolean {
    const dirty: { data: { resource?: unknown }; storage: StorageImpl }[] = [];
    let bytes = 0;
    for (const data of new Set(datas)) {
      const storage = data.resource;
      if (!(storage instanceof StorageImpl) || !this.host.owns(storage)) continue;
      const lms = storage.lms;
      if (!(lms instanceof StorageResidency) || lms.state !== 'inactive' || lms.hostCopyReady) continue;
      dirty.push({ data, storage });
      bytes += storage.byteLength;
    }
    if (dirty.length === 0 || bytes > maxBytes) return false;
    const host = this.host;
    const encoder = host.encoder();
    for (const { data, storage } of dirty) {
      const size = Math.ceil(storage.byteLength / 4) * 4;
      const parked = host.device().createBuffer({ size, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST, label: 'stowage moved input' });
      const { buffer, offset } = host.bindingOf(storage);
      encoder.copyBufferToBuffer(buffer, offset, parked, 0, size);
      data.resource = null;
      host.releaseStorage(storage);
      this.#moved.push({ data, byteLength: storage.byteLength, parked });
    }
    host.submitNow(); // the copies run before the blocks are reused, and the frees complete
    return true;
  }

  /** Gives each moved input a new storage with its bytes (after the output was allocated). */
  moveBack(): void {
    const host = this.host;
    for (const { data, byteLength, parked } of this.#moved.splice(0)) {
      const storage = host.acquireStorage(byteLength);
      const { buffer, offset } = host.bindingOf(storage);
      host.encoder().copyBufferToBuffer(parked, 0, buffer, offset, Math.ceil(byteLength / 4) * 4);
      data.resource = storage;
      this.#toDestroy.push(parked);
    }
  }

  /** After a submit: the buffers whose bytes went back are destroyed (their copies are submitted). */
  submitted(): void {
    for (const buffer of this.#toDestroy.splice(0)) buffer.destroy();
  }
}
