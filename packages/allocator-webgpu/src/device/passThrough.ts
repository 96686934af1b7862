/**
 * A proxy of a WebGPU object: `overrides` answer their keys, every other member is the object's own (methods bound
 * to it, accessors read and set on it: native methods refuse a proxy as `this`). `instanceof` sees the object's
 * prototype.
 */
export function passThrough<T extends object>(target: T, overrides: Record<string, unknown>): T {
  const bound = new Map<PropertyKey, { from: unknown; fn: unknown }>();
  return new Proxy(target, {
    get(object, key) {
      if (Object.hasOwn(overrides, key)) return overrides[key as string];
      const value: unknown = Reflect.get(object, key, object);
      if (typeof value !== 'function') return value;
      let cached = bound.get(key);
      if (cached?.from !== value) bound.set(key, (cached = { from: value, fn: (value as (...a: unknown[]) => unknown).bind(object) }));
      return cached.fn;
    },
    set(object, key, value) {
      return Reflect.set(object, key, value, object);
    },
  });
}
