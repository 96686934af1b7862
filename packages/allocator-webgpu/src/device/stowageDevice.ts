import type { DeviceLike, Runtime } from '@stowage/core';
import { BackendUnavailableError, InvalidArgumentError } from '@stowage/core';
import { WebGpuBuffers } from '../WebGpuBuffers.js';
import { SubAllocatingDevice } from './SubAllocatingDevice.js';

const byProxy = new WeakMap<GPUDevice, SubAllocatingDevice>();

/**
 * A GPUDevice whose storage buffers are ranges of Stowage segments under the device's budget (see SubAllocatingDevice):
 * hand it to any WebGPU program as its device, e.g. onnxruntime-web's
 * `executionProviders: [{ name: 'webgpu', device: stowageDevice(rt, 'webgpu:0') }]`.
 * `source` is a runtime with the `webgpu()` plugin (its device `device`), or the device's WebGpuBuffers service
 * itself (a WebGpuAllocator, outside a runtime).
 * @throws InvalidArgumentError when `source` is neither; BackendUnavailableError when the runtime's device offers
 * no WebGpuBuffers service (not a WebGPU device)
 */
export function stowageDevice(source: Runtime | WebGpuBuffers, device: DeviceLike = 'webgpu:0', options: StowageDeviceOptions = {}): GPUDevice {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', options, 'an options object (or nothing)');
  if (options.paging !== undefined && typeof options.paging !== 'boolean') throw new InvalidArgumentError('options.paging', options.paging, 'true or false');
  const buffers = webGpuBuffersOf(source, device);
  const stowage = new SubAllocatingDevice(buffers, { paging: options.paging === true });
  byProxy.set(stowage.device, stowage);
  return stowage.device;
}

export interface StowageDeviceOptions {
  /**
   * Page ranges out to host memory between runs (Note [Paging between runs] in RangePager.ts): several programs
   * (ORT sessions) then share a budget below the sum of their peaks. The program awaits `settleStowageDevice` at
   * its idle points (between runs); an allocation the budget refuses then pages out the least recently used ranges
   * settled since. Turns the allocator's paging reserve on (`pagingReserve` of `webgpu()`: host copies are staged in
   * it, inside the budget). Default false.
   */
  readonly paging?: boolean;
}

/**
 * An idle point of the program on a device `stowageDevice` made with `paging`: copies to the host every range whose
 * bytes changed since, that no unsubmitted encoder names, so that a later allocation under the budget may page it
 * out (Note [Paging between runs]). Await it between runs (between ORT `session.run` calls, after creating a
 * session). Resolves at once for another device, or without `paging`.
 */
export async function settleStowageDevice(device: GPUDevice): Promise<void> {
  await byProxy.get(device)?.pager.settle();
}

/** Paging counters of a device `stowageDevice` made (host copies, pages out and in, bytes, rebuilt bind groups); undefined for another device. */
export function stowageDevicePaging(device: GPUDevice): SubAllocatingDevice['pager']['counts'] | undefined {
  return byProxy.get(device)?.pager.counts;
}

/** Counters of a device `stowageDevice` made: createBuffer calls, ranges (uniform, mapped at creation), readbacks and their pooled buffers, scratch ranges, alias copies; undefined for another device. */
export function stowageDeviceCounts(device: GPUDevice): SubAllocatingDevice['counts'] | undefined {
  return byProxy.get(device)?.counts;
}

function webGpuBuffersOf(source: Runtime | WebGpuBuffers, device: DeviceLike): WebGpuBuffers {
  if (typeof source !== 'object' || source === null) throw new InvalidArgumentError('source', source, "a Runtime with the webgpu() plugin, or a WebGpuAllocator");
  const asBuffers = source as Partial<WebGpuBuffers>;
  if (typeof asBuffers.bindingOf === 'function' && typeof asBuffers.allocate === 'function' && asBuffers.backend?.gpuDevice !== undefined) return source as WebGpuBuffers;
  if (typeof (source as Partial<Runtime>).service !== 'function') throw new InvalidArgumentError('source', source, "a Runtime with the webgpu() plugin, or a WebGpuAllocator");
  const buffers = (source as Runtime).service(WebGpuBuffers, device);
  if (!buffers) throw new BackendUnavailableError(`${String(device)} offers no WebGPU buffers: stowageDevice needs a WebGPU device of a runtime with the webgpu() plugin.`);
  return buffers;
}
