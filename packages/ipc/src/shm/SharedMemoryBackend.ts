import type { AllocateOptions, Device, MemoryBackend, Pager, Token } from '@stowage/core';
import type { BackendEvent, MemoryBlock, SegmentOptions, StreamId } from '@stowage/core/plugin-kit';
import { CpuMemoryBackend, InvalidArgumentError } from '@stowage/core';

import { SharedMemoryFile } from './SharedMemoryFile.js';

/**
 * Host memory whose segments are POSIX shared-memory objects (`SharedMemoryFile`, /dev/shm/stowage-ipc-…): the
 * caching engine over it makes every host storage sendable to another process without a copy (a descriptor names
 * the segment and the offset). Copies, events and the pager are the plain CPU backend's.
 *
 * A segment's file is unlinked and unmapped when the engine frees the segment (emptyCache, the out-of-memory chain,
 * dispose). **A view of a storage's bytes kept past that point reads unmapped memory and crashes the process**
 * (SharedMemoryFile's buffer cannot be detached): use storages' `data()` at each access.
 *
 * Invariants: reservedBytes == Σ byteLength over segments not yet freed; every live segment's handle maps to its
 * file in `#files`.
 */
export class SharedMemoryBackend implements MemoryBackend<ArrayBuffer> {
  readonly device: Device = Object.freeze({ type: 'cpu', index: 0 });
  readonly alignment: number;
  readonly capacityBytes: number | undefined = undefined;
  readonly defaultStream: StreamId = 0;
  readonly #cpu = new CpuMemoryBackend();
  readonly #files = new Map<ArrayBuffer, SharedMemoryFile>();
  #nextAddress = 64 * 1024;
  #reservedBytes = 0;
  readonly #holdsSegment: (handle: ArrayBuffer) => boolean;

  /**
   * @param options.holdsSegment true for a segment a consumer of another process still uses: when the engine frees
   *   it (the producer's dispose), its name is left for that consumer, the last holder, to unlink (`@stowage/ipc`'s
   *   `Ipc#holdsSegment`). Default: never.
   */
  constructor(options: { readonly holdsSegment?: (handle: ArrayBuffer) => boolean } = {}) {
    this.alignment = this.#cpu.alignment;
    this.#holdsSegment = options.holdsSegment ?? (() => false);
  }

  /** Copies blocks to host arrays and back (LMS), as the CPU backend does. */
  get pager(): Pager {
    return this.#cpu.pager;
  }

  get reservedBytes(): number {
    return this.#reservedBytes;
  }

  /** The shared-memory object (name and inode) of a segment handle this backend made and has not freed, or undefined. */
  objectOf(handle: unknown): { readonly name: string; readonly inode: number } | undefined {
    return handle instanceof ArrayBuffer ? this.#files.get(handle) : undefined;
  }

  /** One kind: every segment is shared memory (`shared: true` asks for nothing more). */
  segmentKind(options: AllocateOptions): number {
    if (options.usage !== undefined && options.usage !== 'storage') {
      throw new InvalidArgumentError('options.usage', options.usage, "'storage' (or nothing) on cpu: host memory has no other usages");
    }
    if (options.shared === false) {
      throw new InvalidArgumentError('options.shared', false, 'true or nothing: every segment of the shared-memory CPU allocator is shared memory');
    }
    return 0;
  }

  malloc(byteLength: number, _options?: SegmentOptions): MemoryBlock<ArrayBuffer> | null {
    let file: SharedMemoryFile;
    try {
      file = SharedMemoryFile.create(Math.max(byteLength, 1));
    } catch {
      return null; // /dev/shm full, or too many descriptors: the engine's out-of-memory chain takes over
    }
    const handle = file.buffer;
    this.#files.set(handle, file);
    const address = this.#nextAddress;
    this.#nextAddress += Math.ceil(Math.max(byteLength, 1) / this.alignment) * this.alignment;
    this.#reservedBytes += byteLength;
    return { handle, byteOffset: 0, address, byteLength };
  }

  free(segment: MemoryBlock<ArrayBuffer>): void {
    const file = this.#files.get(segment.handle);
    if (file === undefined) return;
    this.#files.delete(segment.handle);
    this.#reservedBytes -= segment.byteLength;
    this.#release(segment.handle, file);
  }

  /** Unmaps `file` and unlinks it unless a consumer still holds it (then the last holder unlinks). */
  #release(handle: ArrayBuffer, file: SharedMemoryFile): void {
    let held = false;
    try {
      held = this.#holdsSegment(handle);
    } catch {
      held = false;
    }
    try {
      if (!held) file.unlink();
    } catch {
      // already gone
    } finally {
      file.close();
    }
  }

  copy(dst: ArrayBuffer, dstOffset: number, src: ArrayBuffer, srcOffset: number, byteLength: number): void {
    this.#cpu.copy(dst, dstOffset, src, srcOffset, byteLength);
  }

  write(dst: ArrayBuffer, dstOffset: number, bytes: Uint8Array): void {
    this.#cpu.write(dst, dstOffset, bytes);
  }

  read(src: ArrayBuffer, srcOffset: number, byteLength: number): Promise<Uint8Array> {
    return this.#cpu.read(src, srcOffset, byteLength);
  }

  isStream(stream: StreamId): boolean {
    return this.#cpu.isStream(stream);
  }

  recordEvent(_stream: StreamId): BackendEvent {
    return this.#cpu.recordEvent();
  }

  isEventComplete(_event: BackendEvent): boolean {
    return true; // one immediate stream
  }

  synchronizeEvent(_event: BackendEvent): void {}

  /** Unlinks (but those a consumer holds) and unmaps every segment still held (the engine normally frees them first). */
  dispose(): void {
    for (const [handle, file] of [...this.#files]) {
      this.#files.delete(handle);
      this.#release(handle, file);
    }
    this.#reservedBytes = 0;
  }
}

/** The runtime's shared-memory CPU backend (registered by `sharedMemoryCpu()`): `put` looks up segment names in it. */
export const SharedMemoryBackendToken: Token<SharedMemoryBackend> = Symbol('stowage.ipc.SharedMemoryBackend');
