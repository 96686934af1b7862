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
export function stowageDevice(source: Runtime | WebGpuBuffers, device: DeviceLike = 'webgpu:0'): GPUDevice {
  const buffers = webGpuBuffersOf(source, device);
  const stowage = new SubAllocatingDevice(buffers);
  byProxy.set(stowage.device, stowage);
  return stowage.device;
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
