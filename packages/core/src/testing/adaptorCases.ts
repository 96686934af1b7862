import type { AllocateOptions, Allocator } from '../contracts/Allocator.js';
import type { AllocatorStats } from '../contracts/AllocatorStats.js';
import type { Device } from '../contracts/Device.js';
import type { MemorySnapshot } from '../contracts/MemorySnapshot.js';
import { FailureCallbackAllocator } from '../adaptors/FailureCallbackAllocator.js';
import { LimitingAllocator } from '../adaptors/LimitingAllocator.js';
import { LoggingAllocator } from '../adaptors/LoggingAllocator.js';
import { StatisticsAllocator } from '../adaptors/StatisticsAllocator.js';
import { TrackingAllocator } from '../adaptors/TrackingAllocator.js';
import { ForwardingAllocator } from '../allocators/ForwardingAllocator.js';
import type { DataPtr } from '../storage/DataPtr.js';

/** One adaptor to wrap a runtime's allocator in (`wrapAllocators(type, adaptor.wrap)`), for composition tests. */
export interface AdaptorCase {
  readonly name: string;
  wrap(allocator: Allocator): Allocator;
}

/**
 * A third party's wrapper written against the Allocator interface alone: it delegates every required member and
 * `owns`/`recordStream`, and leaves out the optional `asLmsStorage` hook (so it would hide LMS if LMS were under
 * it). Counts allocations, as a wrapper that does something would.
 */
class ThirdPartyWrapper implements Allocator {
  allocations = 0;

  constructor(readonly upstream: Allocator) {}

  get device(): Device {
    return this.upstream.device;
  }
  get alignment(): number {
    return this.upstream.alignment;
  }
  get events(): Allocator['events'] {
    return this.upstream.events;
  }
  allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    this.allocations++;
    return this.upstream.allocate(nbytes, options);
  }
  free(ptr: DataPtr): void {
    this.upstream.free(ptr);
  }
  owns(ptr: DataPtr): boolean {
    return this.upstream.owns?.(ptr) ?? false;
  }
  recordStream(ptr: DataPtr, stream: number): void {
    this.upstream.recordStream?.(ptr, stream);
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
  dispose(): void {
    this.upstream.dispose();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/**
 * Every adaptor core ships, plus a plain `ForwardingAllocator` and a third party's wrapper: the cases a plugin
 * that offers or consumes a device service proves itself through (Note [Device services]). `LimitingAllocator`
 * gets a limit far above any test's use: it is the composition under test, not the limit.
 */
export function adaptorCases(): readonly AdaptorCase[] {
  return [
    { name: 'TrackingAllocator', wrap: (a) => new TrackingAllocator(a) },
    { name: 'StatisticsAllocator', wrap: (a) => new StatisticsAllocator(a) },
    { name: 'LoggingAllocator', wrap: (a) => new LoggingAllocator(a, () => {}) },
    { name: 'LimitingAllocator', wrap: (a) => new LimitingAllocator(a, '1TiB') },
    { name: 'FailureCallbackAllocator', wrap: (a) => new FailureCallbackAllocator(a, () => false) },
    { name: 'ForwardingAllocator', wrap: (a) => new ForwardingAllocator(a) },
    { name: 'third-party wrapper', wrap: (a) => new ThirdPartyWrapper(a) },
  ];
}
