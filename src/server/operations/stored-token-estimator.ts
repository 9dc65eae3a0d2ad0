import { Provider } from "#gen/contextd/v1/message_pb";
import { createEstimator, type TokenEstimator } from "../../core/tokens/estimator.js";

/**
 * `--stored-token-estimator`: `none`, or `provider:model` (a `Provider` name without its prefix,
 * any case, e.g. `openai_chat:gpt-4o`). The estimator is the one a compile rendered for that
 * provider and model uses when its budget names no estimator, so its counts are found by the
 * compiles most deployments make. Throws naming the flag for anything else.
 */
export function parseStoredTokenEstimator(text: string, where = "--stored-token-estimator"): { provider: Provider; model: string } | undefined {
  if (text === "none") return undefined;
  const colon = text.indexOf(":");
  const name = colon < 0 ? "" : text.slice(0, colon).toUpperCase();
  const provider = (Provider as unknown as Record<string, number>)[name];
  if (colon <= 0 || colon === text.length - 1 || provider === undefined || provider === Provider.UNSPECIFIED) {
    const names = Object.keys(Provider).filter((key) => Number.isNaN(Number(key)) && key !== "UNSPECIFIED").map((key) => key.toLowerCase());
    throw new Error(`invalid ${where} "${text}": want none or provider:model with a provider of ${names.join(", ")} (e.g. openai_chat:gpt-4o)`);
  }
  return { provider: provider as Provider, model: text.slice(colon + 1) };
}

/** The estimator `--stored-token-estimator` names (loading its BPE ranks), or undefined for `none`. */
export async function storedTokenEstimator(text: string): Promise<TokenEstimator | undefined> {
  const parsed = parseStoredTokenEstimator(text);
  return parsed && createEstimator(undefined, parsed.provider, "--stored-token-estimator", undefined, parsed.model);
}
