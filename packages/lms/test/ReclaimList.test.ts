import { expect } from 'chai';
import fc from 'fast-check';
import type { ReclaimNode } from '@stowage/lms/testing';
import { ReclaimList } from '@stowage/lms/testing';
import { InvalidArgumentError } from '@stowage/core';

interface Node extends ReclaimNode {
  readonly id: number;
}

const node = (id: number): Node => ({ id, reclaimPrev: null, reclaimNext: null, reclaimList: null });
const ids = (list: ReclaimList<Node>): number[] => [...list].map((n) => n.id);

/** Checks every invariant the class states, and that it holds exactly `model`, in order. */
function expectMatches(list: ReclaimList<Node>, model: readonly Node[], all: readonly Node[]): void {
  expect(ids(list)).to.deep.equal(model.map((n) => n.id));
  expect(list.size).to.equal(model.length);
  expect(list.head).to.equal(model[0] ?? null);
  expect(list.tail).to.equal(model[model.length - 1] ?? null);
  model.forEach((n, i) => {
    expect(n.reclaimList).to.equal(list);
    expect(n.reclaimPrev).to.equal(model[i - 1] ?? null);
    expect(n.reclaimNext).to.equal(model[i + 1] ?? null);
  });
  for (const n of all) {
    if (model.includes(n)) continue;
    expect([n.reclaimPrev, n.reclaimNext, n.reclaimList], `node ${n.id} off the list`).to.deep.equal([null, null, null]);
  }
}

describe('ReclaimList', () => {
  it('keeps nodes in insertion order and removes from the head, the middle and the tail', () => {
    const list = new ReclaimList<Node>();
    const [a, b, c, d] = [node(1), node(2), node(3), node(4)] as const;
    for (const n of [a, b, c, d]) list.pushBack(n);
    expectMatches(list, [a, b, c, d], [a, b, c, d]);
    expect(list.remove(b)).to.equal(true);
    expect(list.remove(a)).to.equal(true);
    expect(list.remove(d)).to.equal(true);
    expectMatches(list, [c], [a, b, c, d]);
    expect(list.remove(c)).to.equal(true);
    expectMatches(list, [], [a, b, c, d]);
  });

  it('changes nothing when asked to remove a node that is not on it, and refuses a node already on a list', () => {
    const one = new ReclaimList<Node>();
    const other = new ReclaimList<Node>();
    const a = node(1);
    const b = node(2);
    one.pushBack(a);
    expect(other.remove(a), 'a is on another list').to.equal(false);
    expect(one.remove(b), 'b is on no list').to.equal(false);
    expect(() => other.pushBack(a)).to.throw(InvalidArgumentError, /already on a reclaim list/);
    expect(() => one.pushBack(a)).to.throw(InvalidArgumentError, /already on a reclaim list/);
    expectMatches(one, [a], [a, b]);
    expect(other.size).to.equal(0);
  });

  it('lets a walk remove the node it just visited and go on with the rest', () => {
    const list = new ReclaimList<Node>();
    const nodes = [1, 2, 3, 4, 5].map(node);
    for (const n of nodes) list.pushBack(n);
    const visited: number[] = [];
    for (const n of list) {
      visited.push(n.id);
      if (n.id % 2 === 1) list.remove(n);
    }
    expect(visited).to.deep.equal([1, 2, 3, 4, 5]);
    expectMatches(list, [nodes[1]!, nodes[3]!], nodes);
  });

  it('matches an array model under random pushes and removes, with every link consistent after each step', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.boolean(), fc.nat(15)), { maxLength: 200 }), (steps) => {
        const all = Array.from({ length: 16 }, (_, i) => node(i));
        const list = new ReclaimList<Node>();
        const model: Node[] = [];
        for (const [push, i] of steps) {
          const n = all[i]!;
          const at = model.indexOf(n);
          if (push) {
            if (at >= 0) expect(() => list.pushBack(n)).to.throw(InvalidArgumentError);
            else {
              list.pushBack(n);
              model.push(n);
            }
          } else {
            expect(list.remove(n)).to.equal(at >= 0);
            if (at >= 0) model.splice(at, 1);
          }
          expectMatches(list, model, all);
        }
      }),
      { numRuns: 200 },
    );
  });
});
