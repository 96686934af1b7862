export type { AllocateOptions, AllocatorEventSource } from './contracts/Allocator.js';
export { Allocator } from './contracts/Allocator.js';
export type { AllocatorEvents } from './contracts/AllocatorEvents.js';
export { AllocatorContext, AllocatorDecorator, AllocatorFactory } from './contracts/AllocatorFactory.js';
export { wrapAllocators } from './runtime/wrapAllocators.js';
export { AllocatorRegistry } from './runtime/AllocatorRegistry.js';
export type { AllocatorStats, CounterName, StatField, StatKey, StatName, StatPool } from './contracts/AllocatorStats.js';
export type { CpuAllocatorOptions } from './runtime/cpu.js';
export { cpu, createCpuAllocator, registerCpuAllocator } from './runtime/cpu.js';
export type { CpuMemoryBackendOptions, HostBuffer } from './backends/CpuMemoryBackend.js';
export { CpuMemoryBackend } from './backends/CpuMemoryBackend.js';
export type { RuntimeOptions } from './runtime/createRuntime.js';
export { createRuntime } from './runtime/createRuntime.js';
export type { DataPtrInit, Deleter } from './storage/DataPtr.js';
export { CachingAllocator } from './engine/CachingAllocator.js';
export type { CachingAllocatorOptions, ResolvedCachingOptions } from './engine/CachingAllocatorOptions.js';
export type { HistoryOptions } from './engine/History.js';
export { isSmallRequest, roundSize, segmentSize } from './engine/SizeClass.js';
export { DataPtr } from './storage/DataPtr.js';
export type { Device, DeviceLike, DeviceType, KnownDeviceType } from './contracts/Device.js';
export { formatDevice, isSameDevice, parseDevice } from './contracts/Device.js';
export type { DType } from './contracts/DType.js';
export { checkDType, DTYPE_ITEMSIZE, itemsizeOf } from './contracts/DType.js';
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
export { formatBytes, parseBytes } from './units/formatBytes.js';
export type { ForwardingAllocatorOptions } from './allocators/ForwardingAllocator.js';
export { ForwardingAllocator } from './allocators/ForwardingAllocator.js';
export { hostBytes } from './storage/hostBytes.js';
export type { LmsState } from './contracts/LmsStorage.js';
export type { LmsStorage } from './contracts/LmsStorage.js';
export type { MinimalAllocator, SegmentSink } from './allocators/makeAllocator.js';
export { makeAllocator, makeDirectAllocator } from './allocators/makeAllocator.js';
export type { BackendEvent, PageMapping, SegmentOptions, StreamId } from './contracts/MemoryBackend.js';
export { MemoryBackend } from './contracts/MemoryBackend.js';
export type { MemoryBlock } from './contracts/MemoryBlock.js';
export type {
  MemorySnapshot,
  SnapshotAction,
  SnapshotBlock,
  SnapshotBlockState,
  SnapshotFrame,
  SnapshotSegment,
  SnapshotTraceEntry,
} from './contracts/MemorySnapshot.js';
export type { MemoryReclaimer } from './contracts/MemoryReclaimer.js';
export { IpcCollector, LmsReclaimer } from './contracts/MemoryReclaimer.js';
export type { PagedData } from './contracts/Pager.js';
export { Pager } from './contracts/Pager.js';
export type { Plugin } from './contracts/Plugin.js';
export { ReshapePolicy } from './contracts/ReshapePolicy.js';
export { AliasReshapePolicy } from './storage/AliasReshapePolicy.js';
export { viewStrides } from './storage/viewStrides.js';
export type { RuntimeServices, StorageOptions, TensorOptions } from './runtime/Runtime.js';
export { Runtime } from './runtime/Runtime.js';
export { StorageHooks } from './contracts/StorageHooks.js';
export { TensorHooks } from './contracts/TensorHooks.js';
export type { StorageInit } from './storage/StorageImpl.js';
export { StorageImpl } from './storage/StorageImpl.js';
export type { TensorContext, TensorLayout } from './storage/TensorImpl.js';
export { TensorImpl } from './storage/TensorImpl.js';
export type { Token } from './contracts/Token.js';
export { resolve, resolveAll } from './contracts/Token.js';
export type { WriteGuard } from './contracts/WriteGuard.js';
export { BeforeWrite, isWriteGuard } from './contracts/WriteGuard.js';
export type { DeviceAllocatorOptions, DeviceAllocatorSettings, DeviceAllocatorSpec } from './runtime/registerDeviceAllocator.js';
export { createDeviceAllocator, registerDeviceAllocator, resolveDeviceOptions } from './runtime/registerDeviceAllocator.js';
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
