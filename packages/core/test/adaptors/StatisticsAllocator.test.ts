import { expect } from 'chai';
import type { Allocator } from '@stowage/core';
import { createCpuAllocator, InvalidArgumentError, StatisticsAllocator } from '@stowage/core';
import { describeAllocatorContract } from '@stowage/core/testing';
import { expectRefusedOptions } from './refusedOptions.js';

describeAllocatorContract('StatisticsAllocator over the CPU allocator', () => new StatisticsAllocator(createCpuAllocator()));

/** Figures as [current, peak, total], for compact expectations. */
const figures = (c: { current: number; peak: number; total: number }): number[] => [c.current, c.peak, c.total];

describe('StatisticsAllocator#constructor', () => {
  it('refuses unknown option keys (naming the nearest) and option values of the wrong type with InvalidArgumentError', () => {
    expectRefusedOptions((options) => new StatisticsAllocator(createCpuAllocator(), options));
  });

  it('rejects an upstream that is not an allocator', () => {
    expect(() => new StatisticsAllocator(null as unknown as Allocator))
      .to.throw(InvalidArgumentError)
      .with.property('argument', 'upstream');
  });
});

describe('StatisticsAllocator#counters', () => {
  it('starts at zero with no scope open', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    expect(allocator.counters()).to.deep.equal({ bytes: { current: 0, peak: 0, total: 0 }, count: { current: 0, peak: 0, total: 0 } });
    expect(allocator.openScopes).to.equal(0);
  });

  it('counts requested bytes and allocations: current, peak and total', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    const a = allocator.allocate(100);
    const b = allocator.allocate(300);
    allocator.free(a);
    const c = allocator.allocate(50);
    expect(figures(allocator.counters().bytes)).to.deep.equal([350, 400, 450]);
    expect(figures(allocator.counters().count)).to.deep.equal([2, 2, 3]);
    allocator.free(b);
    allocator.free(c);
    expect(figures(allocator.counters().bytes)).to.deep.equal([0, 400, 450]);
  });

  it('counts a release through ptr.release() like a free', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    const ptr = allocator.allocate(64);
    ptr.release();
    expect(figures(allocator.counters().bytes)).to.deep.equal([0, 64, 64]);
    expect(figures(allocator.counters().count)).to.deep.equal([0, 1, 1]);
  });

  it('returns a copy that later allocations do not change', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    const before = allocator.counters();
    using _ptr = allocator.allocate(8);
    expect(before.bytes.current).to.equal(0);
  });

  it('leaves failed allocations out', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator({ limit: '1KiB' }));
    expect(() => allocator.allocate(4096)).to.throw();
    expect(() => allocator.allocate(-1)).to.throw(InvalidArgumentError);
    expect(figures(allocator.counters().count)).to.deep.equal([0, 0, 0]);
  });
});

describe('StatisticsAllocator#pushScope', () => {
  it('opens a frame at zero and returns the enclosing figures', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    using _outer = allocator.allocate(100);
    const enclosing = allocator.pushScope();
    expect(figures(enclosing.bytes)).to.deep.equal([100, 100, 100]);
    expect(allocator.openScopes).to.equal(1);
    expect(figures(allocator.counters().bytes)).to.deep.equal([0, 0, 0]);
    using _inner = allocator.allocate(40);
    expect(figures(allocator.counters().bytes)).to.deep.equal([40, 40, 40]);
    allocator.popScope();
  });
});

describe('StatisticsAllocator#popScope', () => {
  it("returns the scope's figures and folds them into the enclosing frame", () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    const outer = allocator.allocate(100);
    allocator.pushScope();
    const kept = allocator.allocate(50);
    const temporary = allocator.allocate(30);
    allocator.free(temporary);

    const scope = allocator.popScope();

    expect(figures(scope.bytes), 'scope bytes').to.deep.equal([50, 80, 80]);
    expect(figures(scope.count), 'scope count').to.deep.equal([1, 2, 2]);
    // peak of the enclosing frame = max(100, 100 at the push + the scope's peak 80)
    expect(figures(allocator.counters().bytes), 'outer bytes').to.deep.equal([150, 180, 180]);
    expect(figures(allocator.counters().count), 'outer count').to.deep.equal([2, 3, 3]);
    expect(allocator.openScopes).to.equal(0);
    allocator.free(outer);
    allocator.free(kept);
    expect(figures(allocator.counters().bytes)).to.deep.equal([0, 180, 180]);
  });

  it("keeps the enclosing peak when it was higher than the scope's contribution", () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    allocator.free(allocator.allocate(1000));
    allocator.pushScope();
    allocator.free(allocator.allocate(10));
    allocator.popScope();
    expect(figures(allocator.counters().bytes)).to.deep.equal([0, 1000, 1010]);
  });

  it('charges a free of an outer allocation to the scope, where current goes negative', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    const outer = allocator.allocate(100);
    allocator.pushScope();
    outer.release();
    const scope = allocator.popScope();
    expect(figures(scope.bytes)).to.deep.equal([-100, 0, 0]);
    expect(figures(allocator.counters().bytes)).to.deep.equal([0, 100, 100]);
    expect(figures(allocator.counters().count)).to.deep.equal([0, 1, 1]);
  });

  it('folds nested scopes level by level', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    const a = allocator.allocate(10);
    allocator.pushScope();
    const b = allocator.allocate(20);
    allocator.pushScope();
    const c = allocator.allocate(30);
    allocator.free(c);
    expect(allocator.openScopes).to.equal(2);
    const inner = allocator.popScope();
    expect(figures(inner.bytes), 'inner').to.deep.equal([0, 30, 30]);
    const middle = allocator.popScope();
    expect(figures(middle.bytes), 'middle: 20 at the push of inner + 30').to.deep.equal([20, 50, 50]);
    expect(figures(allocator.counters().bytes), 'outer: 10 at the push of middle + 50').to.deep.equal([30, 60, 60]);
    allocator.free(a);
    allocator.free(b);
  });

  it('rejects popping the outermost frame with InvalidArgumentError, changing nothing', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    using _ptr = allocator.allocate(8);
    expect(() => allocator.popScope())
      .to.throw(InvalidArgumentError, /pushScope\(\)/)
      .with.property('argument', 'openScopes');
    allocator.pushScope();
    allocator.popScope();
    expect(() => allocator.popScope()).to.throw(InvalidArgumentError);
    expect(figures(allocator.counters().bytes)).to.deep.equal([8, 8, 8]);
  });
});

describe('StatisticsAllocator#resetPeakStats', () => {
  it('sets every frame peak to its current, and the upstream peaks too', () => {
    using allocator = new StatisticsAllocator(createCpuAllocator());
    allocator.free(allocator.allocate(500));
    using _keep = allocator.allocate(100);
    allocator.pushScope();
    allocator.free(allocator.allocate(50));
    allocator.resetPeakStats();
    expect(figures(allocator.counters().bytes), 'scope').to.deep.equal([0, 0, 50]);
    expect(allocator.memoryStats()['requested_bytes.all.peak']).to.equal(100);
    const scope = allocator.popScope();
    expect(scope.bytes.peak).to.equal(0);
    expect(figures(allocator.counters().bytes), 'outer').to.deep.equal([100, 100, 650]);
  });
});
