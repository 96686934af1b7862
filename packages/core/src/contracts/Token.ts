import type { DependencyContainer } from 'tsyringe';

/**
 * An injection token that carries the type it resolves to. Interfaces and their tokens share one name:
 * `export interface Allocator {…}` and `export const Allocator: Token<Allocator> = Symbol(…)`.
 */
export type Token<T> = symbol & { readonly __type?: T };

/** Resolves a token with its type. */
export function resolve<T>(container: DependencyContainer, token: Token<T>): T {
  return container.resolve<T>(token);
}

/** Resolves every registration of a multi-registered token, in registration order; [] when none. */
export function resolveAll<T>(container: DependencyContainer, token: Token<T>): T[] {
  return container.isRegistered(token, true) ? container.resolveAll<T>(token) : [];
}
