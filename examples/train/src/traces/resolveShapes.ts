import { InvalidArgumentError } from '@stowage/core';
import { checkOptions } from '@stowage/core/plugin-kit';

/** A generator's shapes: counts, and lists of counts (the varying transformer's sequence lengths). */
export type Shapes = Record<string, number | readonly number[]>;

/**
 * The defaults with the given shapes in their place (an undefined shape keeps its default), frozen.
 * @throws InvalidArgumentError for a shape the generator does not have, a count that is not a positive integer,
 *   or a list that is empty or holds one
 */
export function resolveShapes<S extends Shapes>(defaults: S, given: Partial<S> | undefined): S {
  const shapes: Record<string, number | readonly number[]> = { ...defaults };
  for (const [name, value] of Object.entries(checkOptions('shapes', given, Object.keys(defaults)))) {
    if (value === undefined) continue;
    const isList = Array.isArray(defaults[name]);
    const counts: unknown[] = isList && Array.isArray(value) ? value : [value];
    if ((isList && !Array.isArray(value)) || counts.length === 0 || !counts.every(isPositiveInteger)) {
      throw new InvalidArgumentError(`shapes.${name}`, value, isList ? 'a non-empty list of positive integers' : 'a positive integer');
    }
    shapes[name] = isList ? Object.freeze([...(value as number[])]) : (value as number);
  }
  return Object.freeze(shapes) as S;
}

function isPositiveInteger(value: unknown): boolean {
  return Number.isSafeInteger(value) && (value as number) > 0;
}
