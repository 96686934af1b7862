import { InvalidArgumentError, TensorImpl } from '@stowage/core';
import type { Tensor } from './Ops.js';

/**
 * The tensors one training step made and has not freed yet. The step frees each as soon as it is dead, hands its
 * results over with `untrack`, and disposes the set at the end: on an error that releases what was still live.
 *
 * Invariants: every tracked tensor's storage is live; the set holds no tensor twice.
 */
export class StepTensors implements Disposable {
  readonly #live = new Set<Tensor>();

  /** Tracks a tensor, or each tensor of an op's result object; returns its argument. */
  track<T extends Tensor | Readonly<Record<string, Tensor>>>(result: T): T {
    if (result instanceof TensorImpl) this.#live.add(result);
    else for (const tensor of Object.values(result)) this.#live.add(tensor);
    return result;
  }

  /** Releases tracked tensors' storages now. @throws InvalidArgumentError for a tensor this set does not hold. */
  free(...tensors: readonly Tensor[]): void {
    for (const tensor of tensors) {
      this.#forget(tensor);
      tensor.storage.release();
    }
  }

  /** Stops tracking tensors the caller now owns. @throws InvalidArgumentError for a tensor this set does not hold. */
  untrack(...tensors: readonly Tensor[]): void {
    for (const tensor of tensors) this.#forget(tensor);
  }

  /** The number of tensors tracked and not freed. */
  get size(): number {
    return this.#live.size;
  }

  [Symbol.dispose](): void {
    const live = [...this.#live];
    this.#live.clear();
    for (const tensor of live) tensor.storage.release();
  }

  #forget(tensor: Tensor): void {
    if (!this.#live.delete(tensor)) {
      throw new InvalidArgumentError('tensor', `a [${tensor.sizes.join(', ')}] tensor`, 'one this step made and has not freed or handed over');
    }
  }
}
