import type { AllocatorMaker } from './allocatorContract.js';
import { allocatorContract } from './allocatorContract.js';

/**
 * Runs the allocator contract as a mocha suite: `describeAllocatorContract('MyAllocator', () => new My())`.
 * Each check gets a fresh allocator from `make` and disposes it.
 */
export function describeAllocatorContract(name: string, make: AllocatorMaker): void {
  describe(`${name} (allocator contract)`, () => {
    for (const check of allocatorContract) {
      it(check.name, () => check.run(make));
    }
  });
}
