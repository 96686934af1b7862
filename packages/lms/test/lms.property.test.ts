import { expect } from 'chai';
import fc from 'fast-check';
import type { AllocatorStats, Runtime, StorageImpl } from '@stowage/core';
import type { LmsState } from '@stowage/core/plugin-kit';
import { CachingAllocator, cpu, createRuntime, InvalidArgumentError, OutOfMemoryError, resolve } from '@stowage/core';
import { roundSize, segmentSize } from '@stowage/core/plugin-kit';
import type { BuiltInPolicyName, Residency, PinGuard } from '@stowage/lms';
import { LmsController, lms, LmsAllocator, StorageResidency, pin, pinAsync } from '@stowage/lms';

const KiB = 1 << 10;
const MiB = 1 << 20;
/** Four 2 MiB small-pool segments: a few storages of 64 KiB to 1 MiB fill it. */
const BUDGET = 8 * MiB;

/**
 * Note [The LMS model]: the test holds what a program knows: its storages and the bytes it wrote, and the pin guards
 * it holds. From that alone: a storage is active iff a held guard pins it (its pin count is the number of times the
 * held guards name it); never pinned, it is still `allocated`; otherwise it is inactive or reclaimed. A storage
 * holds a host copy from the moment it is reclaimed until it is written or released. Every other state change
 * is a reclaim (inactive → reclaimed) that an allocation may run at any time, or one that the step itself asks for.
 */
interface Entry {
  readonly id: number;
  readonly storage: StorageImpl;
  /** The bytes the program wrote last. */
  readonly bytes: Uint8Array;
  everPinned: boolean;
  hostCopy: boolean;
}

interface Held {
  readonly guard: PinGuard;
  readonly entries: readonly Entry[];
}

type Step =
  | { readonly op: 'allocate'; readonly bytes: number; readonly seed: number; readonly settle: boolean }
  | { readonly op: 'pin'; readonly picks: readonly number[]; readonly wait: boolean }
  | { readonly op: 'unpin'; readonly pick: number }
  | { readonly op: 'write'; readonly pick: number; readonly seed: number; readonly offset: number; readonly length: number }
  | { readonly op: 'read'; readonly pick: number }
  | { readonly op: 'release'; readonly pick: number }
  | { readonly op: 'reclaimInactive' };

const stepArbitrary: fc.Arbitrary<Step> = fc.oneof(
  // `settle` pins the new storage once and lets go, as an operation that wrote it would: it becomes reclaimable.
  { weight: 4, arbitrary: fc.record({ op: fc.constant('allocate' as const), bytes: fc.integer({ min: 64 * KiB, max: MiB }), seed: fc.nat(255), settle: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('pin' as const), picks: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }), wait: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('unpin' as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('write' as const), pick: fc.nat(), seed: fc.nat(255), offset: fc.nat(), length: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('read' as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('release' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ op: 'reclaimInactive' as const }) },
);

function pattern(bytes: number, seed: number): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let i = 0; i < bytes; i++) out[i] = (i * 31 + seed * 7 + (i >> 9)) & 0xff;
  return out;
}

function lmsOf(entry: Entry): StorageResidency {
  return entry.storage.lms as StorageResidency;
}

function stats(rt: Runtime): AllocatorStats & Record<string, number> {
  return rt.allocator('cpu').memoryStats() as AllocatorStats & Record<string, number>;
}

/** One run: a runtime under the budget, the model, and the steps. */
class Run {
  readonly live: Entry[] = [];
  readonly held: Held[] = [];
  readonly device: Residency;
  #nextId = 0;

  constructor(readonly rt: Runtime) {
    rt.allocator('cpu'); // LMS on a device is made with its allocator
    this.device = resolve(rt.container, LmsController).device({ type: 'cpu', index: 0 })!;
  }

  pins(entry: Entry): number {
    let n = 0;
    for (const held of this.held) for (const e of held.entries) if (e === entry) n++;
    return n;
  }

  describe(): string {
    return this.live.map((e) => `#${e.id}(${e.storage.byteLength} B, ${lmsOf(e).state}, ${this.pins(e)} pins)`).join(' ');
  }

  async step(step: Step): Promise<void> {
    const before = new Map(this.live.map((e) => [e, lmsOf(e).state]));
    const pick = (i: number): Entry | undefined => this.live[i % Math.max(1, this.live.length)];
    switch (step.op) {
      case 'allocate':
        return this.#allocate(step.bytes, step.seed, step.settle, before);
      case 'pin': {
        if (this.live.length === 0) return;
        return this.#pin(step.picks.map((i) => pick(i)!), step.wait, before);
      }
      case 'unpin': {
        if (this.held.length === 0) return;
        const [held] = this.held.splice(step.pick % this.held.length, 1);
        held!.guard.release();
        expect(held!.guard.isHeld).to.equal(false);
        this.expectTransitions(before, new Set(held!.entries));
        for (const e of held!.entries) expect(lmsOf(e).state).to.equal(this.pins(e) > 0 ? 'active' : 'inactive');
        return;
      }
      case 'write': {
        const entry = pick(step.pick);
        if (entry === undefined) return;
        const offset = step.offset % entry.storage.byteLength;
        const bytes = pattern(1 + (step.length % (entry.storage.byteLength - offset)), step.seed);
        return this.#bringBack(entry, before, () => {
          this.rt.write(entry.storage, bytes, offset);
          entry.bytes.set(bytes, offset);
          entry.hostCopy = false; // a write leaves no valid host copy
        });
      }
      case 'read': {
        const entry = pick(step.pick);
        if (entry === undefined) return;
        await this.expectBytes(entry);
        // A read never changes residency: a reclaimed storage is read from its host copy.
        expect(lmsOf(entry).state, `#${entry.id} after a read`).to.equal(before.get(entry));
        this.expectTransitions(before, new Set());
        return;
      }
      case 'release': {
        const entry = pick(step.pick);
        if (entry === undefined) return;
        return this.#release(entry, before);
      }
      case 'reclaimInactive': {
        const inactive = this.live.filter((e) => before.get(e) === 'inactive');
        const freed = resolve(this.rt.container, LmsController).reclaimInactive();
        expect(freed, 'reclaimInactive returns the bytes of the inactive storages').to.equal(inactive.reduce((sum, e) => sum + e.storage.byteLength, 0));
        for (const e of inactive) expect(lmsOf(e).state, `#${e.id}`).to.equal('reclaimed');
        this.expectTransitions(before, new Set());
        return;
      }
    }
  }

  #allocate(bytes: number, seed: number, settle: boolean, before: ReadonlyMap<Entry, LmsState>): void {
    let storage: StorageImpl;
    try {
      storage = this.rt.storage(bytes);
    } catch (error) {
      if (!(error instanceof OutOfMemoryError)) throw error;
      this.expectTransitions(before, new Set());
      this.expectCannotFit(bytes, new Set());
      return;
    }
    const entry: Entry = { id: this.#nextId++, storage, bytes: pattern(bytes, seed), everPinned: false, hostCopy: false };
    this.rt.write(storage, entry.bytes); // resident and not pinned: a write allocates nothing
    this.live.push(entry);
    expect(lmsOf(entry).state).to.equal('allocated');
    if (settle) {
      pin(storage).release();
      entry.everPinned = true;
      expect(lmsOf(entry).state).to.equal('inactive');
    }
    this.expectTransitions(before, new Set());
  }

  async #pin(entries: readonly Entry[], wait: boolean, before: ReadonlyMap<Entry, LmsState>): Promise<void> {
    let guard: PinGuard;
    try {
      guard = wait ? await pinAsync(...entries.map((e) => e.storage)) : pin(...entries.map((e) => e.storage));
    } catch (error) {
      if (!(error instanceof OutOfMemoryError)) throw error;
      // Only bringing back a reclaimed storage allocates. Nothing stays pinned; a storage the guard pinned before
      // the one that failed is let go again (resident and inactive), the one that failed is still reclaimed.
      const args = new Set(entries);
      this.expectTransitions(before, args);
      const failed = entries.find((e) => lmsOf(e).state === 'reclaimed');
      expect(failed, 'an out-of-memory pin leaves the storage it could not bring back reclaimed').not.to.equal(undefined);
      expect(before.get(failed!)).to.equal('reclaimed');
      for (const e of args) {
        const state = lmsOf(e).state;
        if (state !== before.get(e)) expect(`${before.get(e)} → ${state}`, `#${e.id} after a failed pin`).to.be.oneOf(['allocated → inactive', 'reclaimed → inactive']);
        if (state !== 'allocated') e.everPinned = true;
      }
      this.expectCannotFit(failed!.storage.byteLength, args);
      return;
    }
    this.held.push({ guard, entries });
    for (const e of entries) {
      e.everPinned = true;
      expect(lmsOf(e).state, `#${e.id} pinned`).to.equal('active');
    }
    this.expectTransitions(before, new Set(entries));
  }

  /** Runs `use` (a write), which brings back `entry` when it is reclaimed, and may then run out of memory. */
  async #bringBack(entry: Entry, before: ReadonlyMap<Entry, LmsState>, use: () => void | Promise<void>): Promise<void> {
    const was = before.get(entry)!;
    try {
      await use();
    } catch (error) {
      if (!(error instanceof OutOfMemoryError) || was !== 'reclaimed') throw error;
      expect(lmsOf(entry).state).to.equal('reclaimed');
      this.expectTransitions(before, new Set());
      this.expectCannotFit(entry.storage.byteLength, new Set());
      return;
    }
    // Access outside a pin brings a reclaimed storage back inactive (Note [Access outside a pin]).
    expect(lmsOf(entry).state, `#${entry.id} after use`).to.equal(was === 'reclaimed' ? 'inactive' : was);
    this.expectTransitions(before, new Set([entry]));
  }

  #release(entry: Entry, before: ReadonlyMap<Entry, LmsState>): void {
    if (this.pins(entry) > 0) {
      const hostBytes = stats(this.rt)['host_bytes.all.current'];
      expect(() => entry.storage.release()).to.throw(InvalidArgumentError, /pinned/);
      expect(entry.storage.isReleased).to.equal(false);
      expect(stats(this.rt)['host_bytes.all.current']).to.equal(hostBytes);
      for (const [e, state] of before) expect(lmsOf(e).state, `#${e.id} after a refused release`).to.equal(state);
      return;
    }
    entry.storage.release();
    expect(entry.storage.isReleased).to.equal(true);
    this.live.splice(this.live.indexOf(entry), 1);
    this.expectTransitions(new Map([...before].filter(([e]) => e !== entry)), new Set());
    expect(this.device.list.has(lmsOf(entry))).to.equal(false);
    expect(this.device.reclaimedStorages.has(lmsOf(entry))).to.equal(false);
  }

  /**
   * Every storage not in `targets` changed at most by being reclaimed: nothing active or allocated is ever
   * reclaimed. Storages now reclaimed hold a host copy.
   */
  expectTransitions(before: ReadonlyMap<Entry, LmsState>, targets: ReadonlySet<Entry>): void {
    for (const [e, was] of before) {
      const now = lmsOf(e).state;
      if (now === 'reclaimed') e.hostCopy = true;
      if (targets.has(e) || now === was) continue;
      expect([was, now], `#${e.id} changed by a step that did not name it`).to.deep.equal(['inactive', 'reclaimed']);
    }
  }

  /**
   * OutOfMemoryError was allowed: everything that could be reclaimed was (only `unpinnedArgs`, let go by a failed
   * pin, are still inactive), and the storages left resident leave no free block of the request's size in a
   * small-pool segment and no room under the budget for a new segment.
   */
  expectCannotFit(requestBytes: number, unpinnedArgs: ReadonlySet<Entry>): void {
    for (const e of this.live) {
      if (lmsOf(e).state === 'inactive') expect(unpinnedArgs.has(e), `#${e.id} inactive after an out-of-memory error`).to.equal(true);
    }
    const size = roundSize(requestBytes, []);
    const snapshot = this.rt.allocator('cpu').snapshot();
    for (const segment of snapshot.segments) {
      if (segment.segment_type !== 'small') continue;
      for (const block of segment.blocks) {
        if (block.state === 'inactive') expect(block.size, `a free block in the segment at ${segment.address} fits the ${size}-byte request`).to.be.below(size);
      }
    }
    const reserved = stats(this.rt)['reserved_bytes.all.current'];
    expect(BUDGET - reserved, 'room under the budget for a new segment').to.be.below(segmentSize(size));
  }

  /** Everything the model knows, checked against LMS and the allocator (after every step). */
  expectConsistent(): void {
    const inactive: number[] = [];
    const reclaimed: number[] = [];
    let active = 0;
    let activeBytes = 0;
    let hostBytes = 0;
    let allocatedBytes = 0;
    for (const e of this.live) {
      const lmsStorage = lmsOf(e);
      const pins = this.pins(e);
      const state = lmsStorage.state;
      expect(lmsStorage.pinCount, `#${e.id} pin count`).to.equal(pins);
      expect(state === 'active', `#${e.id} is ${state} with ${pins} pins`).to.equal(pins > 0);
      if (pins === 0) expect(state, `#${e.id}`).to.equal(e.everPinned ? (state === 'reclaimed' ? 'reclaimed' : 'inactive') : 'allocated');
      expect(lmsStorage.hasHostCopy, `#${e.id} (${state}) host copy`).to.equal(e.hostCopy);
      if (state === 'active') {
        active++;
        activeBytes += e.storage.byteLength;
      }
      if (state === 'inactive') inactive.push(e.id);
      if (state === 'reclaimed') reclaimed.push(e.id);
      else allocatedBytes += roundSize(e.storage.byteLength, []);
      if (e.hostCopy) hostBytes += e.storage.byteLength;
    }
    const ids = new Map(this.live.map((e) => [e.storage, e.id]));
    const sorted = (xs: Iterable<number>): number[] => [...xs].sort((a, b) => a - b);
    expect(sorted([...this.device.list].map((n) => ids.get(n.storage)!)), 'the reclaim list holds exactly the inactive storages').to.deep.equal(inactive);
    expect(this.device.list.size).to.equal(inactive.length);
    expect(sorted([...this.device.reclaimedStorages].map((n) => ids.get(n.storage)!)), 'the reclaimed storages').to.deep.equal(reclaimed);
    const s = stats(this.rt);
    expect(s['reserved_bytes.all.current'], 'reserved bytes').to.be.at.most(BUDGET);
    expect(s['allocated_bytes.all.current'], 'allocated bytes: the resident storages').to.equal(allocatedBytes);
    expect(s['pinned.all.current'], 'pinned').to.equal(active);
    expect(s['pinned_bytes.all.current'], 'pinned bytes').to.equal(activeBytes);
    expect(s['host_bytes.all.current'], 'host bytes: reclaimed storages and clean host copies').to.equal(hostBytes);
    const engine = (this.rt.allocator('cpu') as LmsAllocator).upstream;
    if (engine instanceof CachingAllocator) engine.assertInvariants();
  }

  async expectBytes(entry: Entry): Promise<void> {
    const bytes = await this.rt.read(entry.storage);
    expect(Buffer.from(bytes).equals(Buffer.from(entry.bytes)), `#${entry.id}'s bytes`).to.equal(true);
  }

  /** Lets go of every guard, then reads every storage back (nothing is pinned, so each read fits). */
  async finish(): Promise<void> {
    for (const held of this.held.splice(0)) held.guard.release();
    const storages = this.live.filter((e) => lmsOf(e).state === 'allocated').map((e) => e.storage);
    if (storages.length > 0) pin(...storages).release(); // reclaimable too, so that every page-in finds room
    for (const e of this.live) e.everPinned = true;
    for (const e of this.live) {
      const before = new Map(this.live.map((x) => [x, lmsOf(x).state]));
      await this.expectBytes(e); // may reclaim others to bring e back
      this.expectTransitions(before, new Set([e]));
    }
    this.expectConsistent();
  }
}

describe('LMS under random pins, writes, reads and releases', function () {
  this.timeout(60_000);
  for (const policy of ['lru', 'best-fit'] as const satisfies readonly BuiltInPolicyName[]) {
    it(`keeps every byte, never reclaims a pinned storage and keeps its statistics equal to a recount (${policy})`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(stepArbitrary, { minLength: 1, maxLength: 100, size: 'max' }), async (steps) => {
          const rt = await createRuntime({ plugins: [cpu({ limit: BUDGET }), lms({ policy })] });
          const run = new Run(rt);
          try {
            for (const [i, step] of steps.entries()) {
              try {
                await run.step(step);
                run.expectConsistent();
              } catch (error) {
                (error as Error).message += `\n  at step ${i} ${JSON.stringify(step)}; storages: ${run.describe()}`;
                throw error;
              }
            }
            await run.finish();
          } finally {
            for (const held of run.held) held.guard.release();
            await rt.dispose();
          }
        }),
        // A failure shrinks for a while (each run replays up to 100 steps): report the smallest found in time.
        { numRuns: 80, interruptAfterTimeLimit: 45_000 },
      );
    });
  }
});
