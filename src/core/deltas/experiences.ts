import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ExperienceSchema, type ConversationState } from "#gen/contextd/v1/state_pb";

/**
 * Remembers a fact: whitespace runs become single spaces and the ends are trimmed; a fact already
 * remembered is skipped; a new one gets `exp_<n>` with n one above the largest ever assigned
 * (`last_experience_number` survives `forget` and `clear_state`, so an id never names two facts).
 */
export function remember(state: ConversationState, text: string): ConversationState {
  const normalised = text.replace(/\s+/gu, " ").trim();
  if (normalised === "") throw new ConnectError("text is empty after normalising whitespace", Code.InvalidArgument);
  if (state.experiences.some((experience) => experience.text === normalised)) return state;
  const number = state.lastExperienceNumber + 1n;
  const experience = create(ExperienceSchema, { id: `exp_${number}`, text: normalised });
  return { ...state, experiences: [...state.experiences, experience], lastExperienceNumber: number };
}

/** Forgets an experience by id; unknown ids are ignored (forgetting twice is harmless). */
export function forget(state: ConversationState, experienceId: string): ConversationState {
  if (experienceId === "") throw new ConnectError("experience_id is required", Code.InvalidArgument);
  const experiences = state.experiences.filter((experience) => experience.id !== experienceId);
  return experiences.length === state.experiences.length ? state : { ...state, experiences };
}
