import { ConnectError } from "@connectrpc/connect";
import { expect } from "vitest";

/** The ConnectError `action` throws; fails the test if it throws nothing or anything else. */
export function thrownConnectError(action: () => unknown): ConnectError {
  try {
    action();
  } catch (error) {
    expect(error).toBeInstanceOf(ConnectError);
    return error as ConnectError;
  }
  throw new Error("expected an error");
}
