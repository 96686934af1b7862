import type { DataPtr, Deleter } from '../storage/DataPtr.js';

/**
 * Marks the deleter of a Stowage allocator (AllocatorBase, ForwardingAllocator). A pointer whose deleter is
 * marked was made by an allocator; `Runtime#adopt` refuses such a pointer unless one of its own allocators owns
 * it. Pointers with other deleters (an imported buffer, COW, IPC) are not allocators' to judge.
 *
 * The mark is a property of the deleter itself, not an entry in a module-level registry: each allocator carries
 * its own, so no state is shared between runtimes (or between two copies of core: the key is a registered
 * symbol).
 */
const ALLOCATOR_DELETER = Symbol.for('stowage.allocatorDeleter');

type MarkedDeleter = Deleter & { readonly [ALLOCATOR_DELETER]?: true };

export function markAllocatorDeleter<D extends Deleter>(deleter: D): D {
  Object.defineProperty(deleter, ALLOCATOR_DELETER, { value: true });
  return deleter;
}

/**
 * True when `deleter` is a Stowage allocator's (its pointer was made by an allocator, which frees it): what a plugin
 * that takes ownership of pointers (IPC's sent data) checks before it wraps one.
 */
export function isAllocatorDeleter(deleter: Deleter | null): boolean {
  return deleter !== null && (deleter as MarkedDeleter)[ALLOCATOR_DELETER] === true;
}

const ADOPTION = Symbol.for('stowage.adoption');

/**
 * What an adaptor (ForwardingAllocator) keeps when it takes over a pointer's deleter: the deleter and context it
 * replaced. Branded, so that the allocator underneath can find its own context through any number of adaptors
 * (Note [Device services]: the engine's block inspector answers for pointers adaptors have taken over).
 */
export interface Adoption {
  readonly ptr: DataPtr;
  readonly deleter: Deleter | null;
  readonly context: unknown;
}

export function makeAdoption(ptr: DataPtr): Adoption {
  return { ptr, deleter: ptr.deleter, context: ptr.context, [ADOPTION]: true } as Adoption;
}

function isAdoption(context: unknown): context is Adoption {
  return typeof context === 'object' && context !== null && (context as { [ADOPTION]?: true })[ADOPTION] === true;
}

/**
 * The key of a pointer context that stands over an allocator's own (COW's shared data, Note [Sole references]):
 * `context[UNDERLYING]()` returns the deleter and context it stands over while its pointer is the only one over the
 * data, null otherwise. A registered symbol, so that two copies of core agree.
 *
 * Note [Sole references]: a storage that was lazily cloned holds a COW pointer over its allocator's block; while a
 * clone shares the block, the block is not the storage's alone and no device service may move it (LMS's page-out
 * frees it). Once every clone is gone the storage's pointer is the data's only reference, and the block is the
 * storage's again: the engine's block inspector then answers for it (through `contextUnder`), so LMS reclaims it
 * as any other; releasing the pointer then frees the block through COW's deleter, as before.
 */
export const UNDERLYING: unique symbol = Symbol.for('stowage.underlying') as never;

/** What a context that stands over another answers (Note [Sole references]). */
export interface UnderlyingContext {
  [UNDERLYING](): { readonly deleter: Deleter | null; readonly context: unknown } | null;
}

function underlyingOf(context: unknown): { readonly deleter: Deleter | null; readonly context: unknown } | null {
  if (typeof context !== 'object' || context === null) return null;
  const look = (context as Partial<UnderlyingContext>)[UNDERLYING];
  return typeof look === 'function' ? look.call(context) : null;
}

/** Returned by {@link contextUnder} when `deleter` is not under the pointer's adaptors. */
export const NOT_UNDER = Symbol('stowage.notUnder');

/**
 * The context `ptr` had when `deleter` was its deleter, looking through the adaptors that took it over since, and
 * through a COW context while the pointer is its data's only reference (Note [Sole references]); NOT_UNDER when
 * `deleter` is not among them (COW shared by clones, IPC or another allocator owns the pointer).
 */
export function contextUnder(ptr: DataPtr, deleter: Deleter): unknown {
  let current = ptr.deleter;
  let context = ptr.context;
  for (let depth = 0; current !== deleter; depth++) {
    if (depth === 64) return NOT_UNDER;
    if (isAdoption(context)) {
      current = context.deleter;
      context = context.context;
      continue;
    }
    const under = underlyingOf(context);
    if (under === null) return NOT_UNDER;
    current = under.deleter;
    context = under.context;
  }
  return context;
}
