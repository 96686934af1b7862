// @stowage/lab: instruments that measure Stowage and are not part of it (DESIGN.md, tools/lab): the simulated-time
// device LMS is measured on at full size (SimulatedDevice, the `sim` plugin, link profiles) and the offline
// Belady-MIN reference. Node-only instruments are subpaths: ./replay, ./browser, ./bench-kit; ./tfjs holds tfjs models.
export type { BeladyEviction, BeladyMinResult } from './offline/beladyMin.js';
export { beladyMin } from './offline/beladyMin.js';
export type { OfflineOp, OfflineTensor, OfflineTensorId, OfflineTrace } from './offline/OfflineTrace.js';
export { OfflineTraceRecorder } from './offline/OfflineTraceRecorder.js';
export type { EngineName, EngineStats, KernelAccess, OperationAccess, SimulatedDeviceOptions, SimulatedDeviceStats, TimelineEntry } from './simulated/SimulatedDevice.js';
export type { SimulatedHandle } from './simulated/SimulatedDevice.js';
export { SimulatedDevice } from './simulated/SimulatedDevice.js';
export { AddressMemory, AddressSegment, ZeroHostCopy } from './simulated/AddressMemory.js';
export type { LinkName, LinkProfile } from './simulated/LinkProfile.js';
export { copyDurationNs, LINK_PROFILES, resolveLink } from './simulated/LinkProfile.js';
export type { SimulatedPageOut } from './simulated/SimulatedPager.js';
export { SimulatedPager } from './simulated/SimulatedPager.js';
export type { ByteRange } from './simulated/AccessHazards.js';
export { byteRange } from './simulated/AccessHazards.js';
export type { SimulatedAllocatorOptions } from './simulated/simulated.js';
export { createSimulatedAllocator, registerSimulatedAllocator, simulated, simulatedDeviceOf } from './simulated/simulated.js';
export type { SimulatedDeviceEvents } from './simulated/SimulatedDevice.js';
