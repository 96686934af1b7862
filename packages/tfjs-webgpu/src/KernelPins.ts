import type { StorageImpl } from '@stowage/core';
import type { PinGuard } from '@stowage/lms';
import { PageInPendingError, pin } from '@stowage/lms';
import { TensorBytesInFlightError } from './TensorBytesInFlightError.js';

// Note [LMS inside a synchronous step]: under `lms()`, a tfjs model whose tensors exceed the budget (the webgpu
// plugin's `limit`, the device's one budget: Stowage's segments and the staging buffers of its reads and page-outs;
// tfjs's own pool for uniforms and `dataToGPU` is outside it) runs with tensors paged to host memory. What makes tfjs different
// from a loop that awaits between ops is that a tfjs step (a forward pass, `optimizer.minimize`) is synchronous
// JavaScript: no promise resolves inside it, so a WebGPU page-out made inside it (a copy into a MAP_READ staging
// buffer, whose bytes reach the host when mapAsync resolves) has no host bytes until the step returns, and a
// MAP_READ buffer cannot be a copy source. Within one step, then:
// - reclaiming a *clean* tensor (a complete host copy, unchanged since) only frees its block, and bringing it back
//   is a synchronous `queue.writeBuffer`;
// - reclaiming a *dirty* tensor is safe only when the step does not need it again; if it does, the kernel that
//   needs it throws TensorBytesInFlightError (code PAGE_IN_PENDING) before recording anything: never stale bytes.
// So the floor of any budget is the step's working set: at each kernel, its inputs and output plus every tensor
// written earlier in the step that a later kernel of the step reads (activations saved for backward, gradients
// before the optimizer's update). And since the budget covers page-out staging (Note [One budget] in
// @stowage/allocator-webgpu), a dirty tensor paged out keeps its bytes on the device until the step returns: every
// tensor the step made and still holds is on the device at once, which is the floor in practice. The backend does this:
// - pins (`KernelPins`): `runWebGPUProgram` pins a kernel's resident inputs, then its output as it is allocated,
//   then its reclaimed inputs as they come back (Note [The output before the page-ins]), and keeps the pins until
//   the submit that runs the kernel (tfjs submits every WEBGPU_DEFERRED_SUBMIT_BATCH_SIZE (15) dispatches and
//   before reads and copies): a page-out is its own submit, and would otherwise copy a block before the recorded
//   work that writes it has run. The pins end just before tfjs's `queue.submit` (nothing allocates in between).
//   When an allocation would pass the budget while recorded kernels hold pins, the backend submits them first
//   (`KernelPins#makeRoom`), so that one kernel's tensors, not fifteen's, is what must be resident;
// - uploads are clean (Note [Clean uploads]);
// - Note [The output before the page-ins]: a kernel with reclaimed inputs pins its resident inputs, then
//   allocates its output and brings the reclaimed inputs back largest first (page-ins larger than the output
//   before it, the others after). A block lands wherever the engine finds room; a small one (a 1 KiB bias) taken
//   first can sit in the middle of the free run a larger one needs, and it is pinned, so nothing can move it: on
//   selfie at 1.25 x its floor the second prediction ran out of memory that way with 2.25 MiB free in its segments
//   and a 1 MiB output to place; on faceres a 196 KiB output taken first split the one 4 MiB segment its 4 MiB
//   weight's page-in needed. When the kernel still finds no room, its dirty inputs move out of the way (Note
//   [Moving dirty inputs out of the output's way] in InputRelocation.ts);
// - async points: `read` (every `data()`; its staging inside the budget: Note [Reads within the budget] in
//   readWithinBudget.ts), `lmsSettle()` and `endLmsStep()` start host copies of inactive tensors
//   where a reclaim is predicted (Note [Host copies where a reclaim is predicted]) and wait for every page-out in
//   flight, so that the next step's reclaims find clean tensors (weights, optimizer state, inputs); copies the
//   device refuses for lack of room are made once earlier ones landed; `endLmsStep()` also marks the end of an
//   iteration, from which LMS learns the step's sequence of pins (Note [Speculation] in @stowage/lms) and predicts
//   the next steps;
// - the policy (`SynchronousStepPolicy`, to be given to `lms({ policy })`) reclaims clean tensors first, then dirty
//   ones the learned sequence does not pin again this step, then, in a step nothing predicts (the first, or one
//   that left the learned sequence), dirty ones that look dead from what the backend knows (read since written,
//   not on tfjs's gradient tape), and only then anything else, the farthest next use first. The first step is
//   therefore a guess: it can fail at a budget the later, predicted steps run in;
// - uniforms stay in tfjs's pool by default under LMS: LMS offers only tensors of the request's segment kind
//   before reclaim_all, so a uniform request under pressure would page out every inactive tensor, dirty ones
//   included.

/** What `KernelPins#makeRoom` reads of the device: the engine's reserved bytes and limit, the budget's headroom. */
export interface DeviceRoom {
  readonly engine: { readonly reservedBytes: number; readonly capacityBytes?: number | undefined };
  readonly backend: { readonly budget: { readonly segmentHeadroomBytes: number } };
}

/**
 * The pins of the kernels the Stowage backend runs under LMS (Note [LMS inside a synchronous step]): those of the
 * kernel being run, those of the kernels recorded since the last submit, and the storages tfjs released while a
 * pin held them.
 */
export class KernelPins {
  /** Pins of the kernel `runWebGPUProgram` is running (its inputs and output). */
  #current: PinGuard[] = [];
  /** Pins of the kernels recorded since the last submit: released at the submit that runs them. */
  #recorded: PinGuard[] = [];
  /** Storages tfjs released while a pin held them (a kernel that failed before recording): released once unpinned. */
  #releasedWhilePinned: StorageImpl[] = [];

  /**
   * `submitNow` submits what tfjs recorded (ending the recorded kernels' pins); `room` is the device's allocator
   * (its engine and backend).
   */
  constructor(
    private readonly submitNow: () => void,
    private readonly room: () => DeviceRoom,
  ) {}

  /** True while kernels recorded since the last submit hold pins. */
  get hasRecorded(): boolean {
    return this.#recorded.length > 0;
  }

  /** True while the kernel being run holds pins. */
  get hasCurrent(): boolean {
    return this.#current.length > 0;
  }

  /**
   * Pins `storages` for the kernel being run (bringing reclaimed ones back, in the order given).
   * @throws TensorBytesInFlightError when a reclaimed one's bytes are still on their way to host memory
   */
  pinForKernel(storages: readonly StorageImpl[]): void {
    try {
      this.#current.push(pin(...storages));
    } catch (error) {
      if (error instanceof PageInPendingError) throw new TensorBytesInFlightError(error.byteLength, { cause: error });
      throw error;
    }
  }

  /** The kernel being run was recorded: its pins last until the submit that runs it. */
  kernelRecorded(): void {
    this.#recorded.push(...this.#current.splice(0));
  }

  /** The kernel being run failed before it was recorded: its pins end now. */
  kernelFailed(): void {
    for (const guard of this.#current.splice(0)) guard.release();
  }

  /**
   * Just before tfjs's `queue.submit`: the recorded kernels' pins end, and the current kernel's too when it is
   * being recorded (the submit runs it).
   */
  releaseAtSubmit(currentRecorded: boolean): void {
    if (this.#recorded.length === 0 && !(currentRecorded && this.#current.length > 0)) return;
    const pins = this.#recorded;
    this.#recorded = [];
    if (currentRecorded) pins.push(...this.#current.splice(0));
    for (const guard of pins) guard.release();
  }

  /** Every pin ends (the backend is disposed: nothing runs any more). */
  releaseAll(): void {
    for (const guard of [...this.#recorded.splice(0), ...this.#current.splice(0)]) guard.release();
  }

  /**
   * Before an allocation of `bytes`: when it would pass the budget and recorded kernels hold pins, submits them
   * first, so that their tensors can be reclaimed.
   */
  makeRoom(bytes: number): void {
    if (this.#recorded.length === 0) return;
    const { engine, backend } = this.room();
    if (engine.reservedBytes + bytes > (engine.capacityBytes ?? Number.POSITIVE_INFINITY) || bytes > backend.budget.segmentHeadroomBytes) this.submitNow();
  }

  /** Releases `storage` once no pin holds it (now, when none does). */
  releaseWhenUnpinned(storage: StorageImpl, release: (storage: StorageImpl) => void): void {
    if (storage.lms?.state === 'active') this.#releasedWhilePinned.push(storage);
    else release(storage);
  }

  /** Releases the storages tfjs released while a pin held them, once no pin does. */
  releaseUnpinned(release: (storage: StorageImpl) => void): void {
    if (this.#releasedWhilePinned.length === 0) return;
    const storages = this.#releasedWhilePinned.filter((s) => s.lms?.state !== 'active');
    this.#releasedWhilePinned = this.#releasedWhilePinned.filter((s) => s.lms?.state === 'active');
    for (const storage of storages) release(storage);
  }
}
