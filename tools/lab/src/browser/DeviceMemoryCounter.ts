/**
 * Counts a device's buffers at the device: `createBuffer` calls and bytes by usage class, and live bytes with
 * their peak, by shadowing `createBuffer` with an own property and each new buffer's `destroy`. `uninstall()` puts
 * the device's method back. Buffers created before `install()` are not counted.
 *
 * Invariants: liveBytes == sum of sizes of counted buffers not yet destroyed; peakBytes >= liveBytes.
 */
export class DeviceMemoryCounter {
  /** createBuffer calls since install, all usages. */
  calls = 0;
  /** createBuffer calls for tensor storage (STORAGE usage) since install. */
  storageCalls = 0;
  /** createBuffer calls for buffers with UNIFORM usage since install. */
  uniformCalls = 0;
  liveBytes = 0;
  peakBytes = 0;
  #installed = false;

  constructor(private readonly device: GPUDevice) {}

  install(): this {
    if (this.#installed) return this;
    this.#installed = true;
    const create = this.device.createBuffer.bind(this.device);
    this.device.createBuffer = (descriptor: GPUBufferDescriptor): GPUBuffer => {
      const buffer = create(descriptor);
      this.calls++;
      if ((descriptor.usage & 0x0080) !== 0) this.storageCalls++;
      if ((descriptor.usage & 0x0040) !== 0) this.uniformCalls++;
      this.liveBytes += descriptor.size;
      this.peakBytes = Math.max(this.peakBytes, this.liveBytes);
      const destroy = buffer.destroy.bind(buffer);
      let destroyed = false;
      buffer.destroy = () => {
        if (!destroyed) this.liveBytes -= descriptor.size;
        destroyed = true;
        destroy();
      };
      return buffer;
    };
    return this;
  }

  /** Starts a new peak from what is live now. */
  resetPeak(): void {
    this.peakBytes = this.liveBytes;
  }

  uninstall(): void {
    if (!this.#installed) return;
    this.#installed = false;
    delete (this.device as { createBuffer?: unknown }).createBuffer;
  }
}
