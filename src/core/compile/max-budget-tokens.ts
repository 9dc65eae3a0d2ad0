/**
 * The largest token figure a budget may name: 2^53 - 1, the largest integer a double holds exactly.
 * Counts are doubles; `max_tokens = 2^63-1` used to round to 2^63, fail int64 encoding and answer INTERNAL.
 * A module of its own so that the budget, the head elision and the calibration's checks share it
 * without importing each other.
 */
export const maxBudgetTokens = Number.MAX_SAFE_INTEGER;
