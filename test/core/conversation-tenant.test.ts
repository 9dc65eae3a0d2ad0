import { describe, expect, it } from "vitest";
import { tenantOf } from "../../src/core/model/conversation-tenant.js";

describe("tenantOf", () => {
  it("is the id's part before its first slash, empty without one", () => {
    expect([tenantOf("acme/a/b"), tenantOf("plain"), tenantOf("/lead"), tenantOf("acme/")]).toEqual(["acme", "", "", "acme"]);
  });
});
