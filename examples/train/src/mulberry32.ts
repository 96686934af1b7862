/**
 * A seeded pseudo-random generator (Tommy Ettinger's mulberry32): each call returns the next float in [0, 1), with
 * 32 bits of state. The same seed gives the same sequence on every platform: the arithmetic is 32-bit integer only.
 */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `count` floats uniform in [-scale, scale), drawn from `random` in order. */
export function uniformArray(random: () => number, count: number, scale: number): Float32Array {
  const values = new Float32Array(count);
  for (let i = 0; i < count; i++) values[i] = (2 * random() - 1) * scale;
  return values;
}
