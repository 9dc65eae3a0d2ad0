import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "vitest";

/** Awaits `promise`, which must fail with a ConnectError of `code` whose message matches `pattern`; returns the message. */
export async function rejectsWith(promise: Promise<unknown>, code: Code, pattern: RegExp): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  expect(error).toBeInstanceOf(ConnectError);
  expect(Code[(error as ConnectError).code]).toBe(Code[code]);
  expect((error as ConnectError).rawMessage).toMatch(pattern);
  return (error as ConnectError).rawMessage;
}
