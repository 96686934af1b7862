import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { openWebGpuDevice } from '@stowage/allocator-webgpu';

/**
 * Opens a fresh GPUDevice (Dawn in Node, same backend and adapter every time) for each allocator run, and keeps
 * every context it opened alive until the process ends.
 *
 * Note [A device per allocator run]: Dawn's Vulkan backend sub-allocates buffers of up to 4 MiB from larger
 * device-memory heaps and, when they empty, keeps the heaps in a pool of the device for later buffers; only
 * destroying the device returns them (measured here: 100 destroyed 1 MiB buffers stay resident after the queue
 * drains, until `device.destroy()`). On one shared device the allocator that runs second would find the first
 * one's memory already resident: neither its resident memory nor its createBuffer cost would be its own. So each
 * allocator run gets a new device, destroyed after it; the Dawn instance, driver and adapter are the same.
 */
export class DeviceSource {
  /** The `webgpu` package's GPU object must outlive its devices, or the process may crash: keep them all. */
  readonly #opened: WebGpuContext[] = [];

  async open(): Promise<WebGpuContext> {
    const context = await openWebGpuDevice();
    this.#opened.push(context);
    return context;
  }
}
