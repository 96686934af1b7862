export type { AllocateOptions, AllocatorEventSource } from './Allocator.js';
export { Allocator } from './Allocator.js';
export type { AllocatorEvents } from './AllocatorEvents.js';
export { AllocatorContext, AllocatorDecorator, AllocatorFactory } from './AllocatorFactory.js';
export { wrapAllocators } from './wrapAllocators.js';
export { AllocatorRegistry } from './AllocatorRegistry.js';
export type { AllocatorStats, CounterName, StatField, StatKey, StatName, StatPool } from './AllocatorStats.js';
export type { CpuAllocatorOptions } from './cpu.js';
export { cpu, createCpuAllocator, registerCpuAllocator } from './cpu.js';
export type { CpuMemoryBackendOptions, HostBuffer } from './CpuMemoryBackend.js';
export { CpuMemoryBackend } from './CpuMemoryBackend.js';
export type { RuntimeOptions } from './createRuntime.js';
export { createRuntime } from './createRuntime.js';
export type { DataPtrInit, Deleter } from './DataPtr.js';
export { CachingAllocator } from './engine/CachingAllocator.js';
export type { CachingAllocatorOptions, ResolvedCachingOptions } from './engine/CachingAllocatorOptions.js';
export type { HistoryOptions } from './engine/History.js';
export { isSmallRequest, roundSize, segmentSize } from './engine/SizeClass.js';
export { DataPtr } from './DataPtr.js';
export type { Device, DeviceLike, DeviceType, KnownDeviceType } from './Device.js';
export { formatDevice, isSameDevice, parseDevice } from './Device.js';
export type { DType } from './DType.js';
export { checkDType, DTYPE_ITEMSIZE, itemsizeOf } from './DType.js';
export { BackendUnavailableError } from './errors/BackendUnavailableError.js';
export { DeviceError } from './errors/DeviceError.js';
export { DeviceMismatchError } from './errors/DeviceMismatchError.js';
export { DisposedError } from './errors/DisposedError.js';
export { DoubleFreeError } from './errors/DoubleFreeError.js';
export { ForeignPointerError } from './errors/ForeignPointerError.js';
export { InvalidArgumentError } from './errors/InvalidArgumentError.js';
export type { OutOfMemoryDetails } from './errors/OutOfMemoryError.js';
export { isOutOfMemoryError, OutOfMemoryError } from './errors/OutOfMemoryError.js';
export type { StowageErrorCode } from './errors/StowageError.js';
export { isStowageError, StowageError } from './errors/StowageError.js';
export { UseAfterReleaseError } from './errors/UseAfterReleaseError.js';
export { formatBytes, parseBytes } from './formatBytes.js';
export type { ForwardingAllocatorOptions } from './ForwardingAllocator.js';
export { ForwardingAllocator } from './ForwardingAllocator.js';
export { hostBytes } from './hostBytes.js';
export type { LmsState } from './LmsStorage.js';
export type { LmsStorage } from './LmsStorage.js';
export type { MinimalAllocator, SegmentSink } from './makeAllocator.js';
export { makeAllocator, makeDirectAllocator } from './makeAllocator.js';
export type { BackendEvent, PageMapping, SegmentOptions, StreamId } from './MemoryBackend.js';
export { MemoryBackend } from './MemoryBackend.js';
export type { MemoryBlock } from './MemoryBlock.js';
export type {
  MemorySnapshot,
  SnapshotAction,
  SnapshotBlock,
  SnapshotBlockState,
  SnapshotFrame,
  SnapshotSegment,
  SnapshotTraceEntry,
} from './MemorySnapshot.js';
export type { MemoryReclaimer } from './MemoryReclaimer.js';
export { IpcCollector, LmsReclaimer } from './MemoryReclaimer.js';
export type { PagedData } from './Pager.js';
export { Pager } from './Pager.js';
export type { Plugin } from './Plugin.js';
export { AliasReshapePolicy, ReshapePolicy } from './ReshapePolicy.js';
export { viewStrides } from './internal/shape.js';
export type { RuntimeServices, StorageOptions, TensorOptions } from './Runtime.js';
export { Runtime } from './Runtime.js';
export { StorageHooks } from './StorageHooks.js';
export { TensorHooks } from './TensorHooks.js';
export type { StorageInit } from './StorageImpl.js';
export { StorageImpl } from './StorageImpl.js';
export type { TensorContext, TensorLayout } from './TensorImpl.js';
export { TensorImpl } from './TensorImpl.js';
export type { Token } from './Token.js';
export { resolve, resolveAll } from './Token.js';
export type { VirtualMemoryBackendOptions } from './VirtualMemoryBackend.js';
export type { WriteGuard } from './WriteGuard.js';
export { BeforeWrite, isWriteGuard } from './WriteGuard.js';
export { VirtualMemoryBackend } from './VirtualMemoryBackend.js';
export type { AllocationFailure, FailureCallback, FailureCallbackAllocatorOptions } from './adaptors/FailureCallbackAllocator.js';
export { FailureCallbackAllocator } from './adaptors/FailureCallbackAllocator.js';
export type { LimitingAllocatorOptions } from './adaptors/LimitingAllocator.js';
export { LimitingAllocator } from './adaptors/LimitingAllocator.js';
export type { LoggingAllocatorOptions } from './adaptors/LoggingAllocator.js';
export { LoggingAllocator } from './adaptors/LoggingAllocator.js';
export type { RmmLogAction, RmmLogRecord } from './adaptors/parseRmmCsv.js';
export { parseRmmCsv, RMM_CSV_HEADER } from './adaptors/parseRmmCsv.js';
export type { StatisticsAllocatorOptions, StatisticsCounter, StatisticsCounters } from './adaptors/StatisticsAllocator.js';
export { StatisticsAllocator } from './adaptors/StatisticsAllocator.js';
export type { TrackedAllocation, TrackingAllocatorOptions } from './adaptors/TrackingAllocator.js';
export { TrackingAllocator } from './adaptors/TrackingAllocator.js';
