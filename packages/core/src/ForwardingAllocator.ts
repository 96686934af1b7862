import type { AllocateOptions, Allocator, AllocatorEventSource } from './Allocator.js';
import type { AllocatorStats } from './AllocatorStats.js';
import type { DataPtr } from './DataPtr.js';
import type { Device } from './Device.js';
import type { LmsStorage } from './LmsStorage.js';
import type { MemorySnapshot } from './MemorySnapshot.js';
import type { StorageImpl } from './StorageImpl.js';

export interface ForwardingAllocatorOptions {
  /** Dispose the upstream when this adaptor is disposed (default true: the stack is owned top-down). */
  readonly ownsUpstream?: boolean;
}

/**
 * The base of RMM-style adaptors: forwards every member to `upstream`, so that a subclass overrides only the
 * behaviour it adds. Adaptors stack without a container:
 * `new StatisticsAllocator(new LimitingAllocator(new CachingAllocator(backend), 8 * GiB))`.
 */
export class ForwardingAllocator implements Allocator {
  readonly upstream: Allocator;
  readonly #ownsUpstream: boolean;
  #disposed = false;

  constructor(upstream: Allocator, options: ForwardingAllocatorOptions = {}) {
    this.upstream = upstream;
    this.#ownsUpstream = options.ownsUpstream ?? true;
  }

  get device(): Device {
    return this.upstream.device;
  }

  get alignment(): number {
    return this.upstream.alignment;
  }

  get events(): AllocatorEventSource {
    return this.upstream.events;
  }

  allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    return this.upstream.allocate(nbytes, options);
  }

  free(ptr: DataPtr): void {
    this.upstream.free(ptr);
  }

  copyData(dst: DataPtr, src: DataPtr, nbytes: number, dstOffset?: number, srcOffset?: number): void {
    this.upstream.copyData(dst, src, nbytes, dstOffset, srcOffset);
  }

  writeBytes(dst: DataPtr, bytes: Uint8Array, dstOffset?: number): void {
    this.upstream.writeBytes(dst, bytes, dstOffset);
  }

  readBytes(src: DataPtr, srcOffset?: number, byteLength?: number): Promise<Uint8Array> {
    return this.upstream.readBytes(src, srcOffset, byteLength);
  }

  memoryStats(): AllocatorStats {
    return this.upstream.memoryStats();
  }

  resetPeakStats(): void {
    this.upstream.resetPeakStats();
  }

  snapshot(): MemorySnapshot {
    return this.upstream.snapshot();
  }

  emptyCache(): void {
    this.upstream.emptyCache();
  }

  asLmsStorage(storage: StorageImpl): LmsStorage | null {
    return this.upstream.asLmsStorage?.(storage) ?? null;
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    if (this.#ownsUpstream) this.upstream.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
