import type { Device, MemoryBackend } from '@stowage/core';
import type { BackendEvent, MemoryBlock, StreamId } from '@stowage/core/plugin-kit';
import { DeviceError } from '@stowage/core';

interface EpochEvent extends BackendEvent {
  readonly epoch: number;
}

/**
 * A device-free stand-in for WebGpuMemoryBackend's placement-relevant behaviour: segments of the requested size at
 * fresh addresses, one stream, frees deferred to the next `submit()` (Note [Submit epochs] in
 * SubmitEpochs.ts), the same 256-byte alignment (Dawn's minStorageBufferOffsetAlignment). It holds no
 * memory: for sweeps that count segments and reserved bytes only (segmentSizing.bench.ts).
 */
export class EpochBackend implements MemoryBackend<null> {
  readonly device: Device = Object.freeze({ type: 'webgpu', index: 0 });
  readonly alignment = 256;
  readonly capacityBytes = 2 ** 40;
  readonly defaultStream: StreamId = 0;
  readonly deferredFree = true;
  /** Segments made so far: WebGPU's createBuffer calls. */
  segmentsMade = 0;
  /** Bytes of the segments made so far. */
  bytesMade = 0;
  #epoch = 0;
  /** As WebGpuMemoryBackend's segment addresses: above 2^31 from the start. */
  #nextAddress = 2 ** 32;

  /** The program's `queue.submit`: frees recorded before it may be reused. */
  submit(): void {
    this.#epoch++;
  }

  malloc(byteLength: number): MemoryBlock<null> {
    this.segmentsMade++;
    this.bytesMade += byteLength;
    const address = this.#nextAddress;
    this.#nextAddress += byteLength;
    return { handle: null, byteOffset: 0, address, byteLength };
  }

  free(): void {}

  copy(): void {
    throw new DeviceError('EpochBackend holds no memory: it cannot copy.');
  }

  write(): void {
    throw new DeviceError('EpochBackend holds no memory: it cannot be written.');
  }

  read(): Promise<Uint8Array> {
    return Promise.reject(new DeviceError('EpochBackend holds no memory: it cannot be read.'));
  }

  isStream(stream: StreamId): boolean {
    return stream === 0;
  }

  recordEvent(stream: StreamId): EpochEvent {
    return { stream, epoch: this.#epoch };
  }

  isEventComplete(event: BackendEvent): boolean {
    return this.#epoch > (event as EpochEvent).epoch;
  }

  synchronizeEvent(): void {
    this.#epoch++;
  }
}
