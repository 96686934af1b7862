/**
 * The training loop's allocator reserved more than the budget it ran under: found by the check after an op
 * (`runUnderLms`), so the engine's own guarantee (reserved bytes never exceed its `limit`) was broken.
 */
export class BudgetExceededError extends Error {
  constructor(
    /** The op after which it was seen, counting from 1 over the whole run (model creation included). */
    readonly opCount: number,
    /** `reserved_bytes.all.current` after that op. */
    readonly reservedBytes: number,
    readonly budgetBytes: number,
  ) {
    super(`After op ${opCount} the allocator reserved ${reservedBytes} bytes, over its budget of ${budgetBytes} bytes.`);
    this.name = 'BudgetExceededError';
  }
}
