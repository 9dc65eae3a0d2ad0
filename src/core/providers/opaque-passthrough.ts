import { providerRuleViolation } from "./rule-violation.js";

/**
 * Invariant 5 (providers.md): opaque values (call ids, signatures, encrypted content, item ids)
 * reach the body byte for byte and in order. `expected` is collected from the payload, `actual`
 * from the rendered body, each as `kind:value` strings; any difference is FAILED_PRECONDITION.
 * This double-checks the renderer itself, so a merge or reorder bug can never ship a body whose
 * signatures no longer match what the provider issued.
 */
export function checkOpaquePassthrough(provider: string, expected: readonly string[], actual: readonly string[]): void {
  const length = Math.max(expected.length, actual.length);
  for (let index = 0; index < length; index++) {
    if (expected[index] !== actual[index]) {
      throw providerRuleViolation(
        `${provider}.opaque_passthrough`,
        `opaque value ${index}`,
        `the body has ${JSON.stringify(actual[index] ?? null)} where the payload has ${JSON.stringify(expected[index] ?? null)}`,
      );
    }
  }
}
