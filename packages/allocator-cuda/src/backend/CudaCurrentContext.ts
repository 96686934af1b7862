import type { CudaContext, CudaDriver } from '../driver/CudaDriver.js';

/**
 * Note [One current context]: driver calls act on the calling thread's current context, so each device's backend
 * makes its primary context current before its calls. Setting it is a driver call of its own (cuCtxSetCurrent), as
 * costly as the cuMemAlloc_v2 it precedes on the stand-in and counted against the driver calls PyTorch makes. This
 * object, shared by one driver's devices, remembers which context Stowage last made current on the JavaScript
 * thread and sets it only when another device's calls came between. Code outside Stowage that makes another
 * context current on that thread (another CUDA library) calls `forget()` afterwards (`CudaAllocator#contextChanged`),
 * so the next call sets it again.
 */
export class CudaCurrentContext {
  #current: CudaContext | null = null;

  constructor(private readonly driver: CudaDriver) {}

  /** Makes `context` current on this thread unless Stowage already did and nothing came between. */
  use(context: CudaContext): void {
    if (this.#current === context) return;
    this.driver.setCurrentContext(context);
    this.#current = context;
  }

  /** The next `use` sets its context whatever was set before. */
  forget(): void {
    this.#current = null;
  }
}
