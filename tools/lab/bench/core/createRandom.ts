/** A deterministic pseudo-random source: `next()` is uniform in [0, 1). */
export interface Random {
  next(): number;
  /** Uniform integer in [0, n). */
  below(n: number): number;
  /** Log-uniform integer in [minBytes, maxBytes]: every power-of-two range is equally likely. */
  logUniformBytes(minBytes: number, maxBytes: number): number;
}

/** mulberry32 seeded with `seed`; the same seed gives the same sequence on every platform. */
export function createRandom(seed: number): Random {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const logMin = (minBytes: number) => Math.log(minBytes);
  return {
    next,
    below: (n) => Math.floor(next() * n),
    logUniformBytes: (minBytes, maxBytes) =>
      Math.min(maxBytes, Math.floor(Math.exp(logMin(minBytes) + next() * (Math.log(maxBytes + 1) - logMin(minBytes))))),
  };
}
