/**
 * Counts `device.createBuffer` calls and bytes while installed, by shadowing the method with an own property that
 * forwards to the prototype's; `uninstall()` deletes the property, so the prototype's shows through again.
 * For allocators the bench does not own (tfjs's BufferManager), whose creations it cannot see otherwise.
 */
export class CreateBufferCounter {
  /** Calls since install. */
  calls = 0;
  /** Bytes asked for since install. */
  bytes = 0;
  #installed = false;

  constructor(private readonly device: GPUDevice) {}

  install(): void {
    if (this.#installed) return;
    this.#installed = true;
    const create = this.device.createBuffer.bind(this.device);
    this.device.createBuffer = (descriptor: GPUBufferDescriptor): GPUBuffer => {
      this.calls++;
      this.bytes += descriptor.size;
      return create(descriptor);
    };
  }

  uninstall(): void {
    if (!this.#installed) return;
    this.#installed = false;
    delete (this.device as { createBuffer?: unknown }).createBuffer;
  }
}
