import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { AtRestCipher, parseEncryptionKeys, plainValues, storedValuesOf, type AtRestKey } from "../../src/store/at-rest-encryption.js";
import { thrownConnectError as connectError } from "../support/thrown.js";

const keyA = Buffer.alloc(32, 0xa1);
const keyB = Buffer.alloc(32, 0xb2);
const keyT = Buffer.alloc(32, 0xc3);
const where = () => "message 4 of the history segment";
const text = (value: string) => Buffer.from(value, "utf8");

/** What `run` throws (any error). */
function thrown(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  throw new Error("expected an error");
}

describe("parseEncryptionKeys", () => {
  it("reads [tenant/]key-id:key entries by lines or commas, base64 or hex, skipping comments and blanks", () => {
    const keys = parseEncryptionKeys(`# rotated 2026-12\n2026-12:${keyA.toString("base64")}\n\n2026-06:${keyB.toString("hex")}, acme/acme-1:${keyT.toString("base64")}\n`, "the test");
    expect(keys).toEqual([
      { id: "2026-12", key: keyA, tenant: "" },
      { id: "2026-06", key: keyB, tenant: "" },
      { id: "acme-1", key: keyT, tenant: "acme" },
    ]);
  });

  it.each([
    ["", /the test lists no key/],
    ["# only a comment", /the test lists no key/],
    [`k1${keyA.toString("base64")}`, /invalid entry 1 of the test: want \[tenant\/\]key-id:key/],
    [`k 1:${keyA.toString("base64")}`, /invalid key id "k 1" in entry 1 of the test/],
    [`:${keyA.toString("base64")}`, /invalid key id "" in entry 1/],
    [`k1:${Buffer.alloc(16).toString("base64")}`, /invalid key "k1" in entry 1 of the test: want 32 bytes \(AES-256\)/],
    [`k1:${keyA.toString("hex").slice(2)}`, /invalid key "k1"/],
    [`k1:not base64 at all, not even close!!!!!!!!!!`, /invalid key "k1"/],
    [`k1:${keyA.toString("base64")}\nk1:${keyB.toString("base64")}`, /key id "k1" is listed twice in the test/],
    [`k1:${keyA.toString("base64")}\nac me/k2:${keyB.toString("base64")}`, /invalid tenant "ac me" in entry 2/],
    [`acme/k1:${keyA.toString("base64")}`, /the test lists only tenants' keys: want a key without a tenant too/],
  ])("refuses %j, naming the entry and what is wrong", (input, message) => {
    expect(() => parseEncryptionKeys(input, "the test")).toThrow(message);
  });

  it("takes at most 1,000 keys (maxEncryptionKeys)", () => {
    const lines = (count: number) => Array.from({ length: count }, (_, index) => `k${index}:${keyA.toString("base64")}`).join("\n");
    expect(parseEncryptionKeys(lines(1_000), "the test")).toHaveLength(1_000);
    expect(() => parseEncryptionKeys(lines(1_001), "the test")).toThrow(/the test lists more than 1000 keys, the most one sidecar takes/);
  });

  it("never puts the key material in an error", () => {
    const material = keyA.toString("base64").slice(0, 40);
    const error = thrown(() => parseEncryptionKeys(`k1:${material}`, "the test")) as Error;
    expect(error.message).toMatch(/invalid key "k1"/);
    expect(error.message).not.toContain(material);
  });
});

describe("AtRestCipher", () => {
  const keys: AtRestKey[] = [
    { id: "new", key: keyA, tenant: "" },
    { id: "old", key: keyB, tenant: "" },
    { id: "acme-1", key: keyT, tenant: "acme" },
  ];
  const cipher = new AtRestCipher(keys);

  it("seals with the first key and a fresh nonce per value, opens what it sealed, and never holds the plaintext", () => {
    const plaintext = text("the distinctive text of a message");
    const first = cipher.seal("c1", "message", plaintext);
    const second = cipher.seal("c1", "message", plaintext);
    expect(first.subarray(0, 6)).toEqual(Buffer.from([0xce, 0x01, 3, ...Buffer.from("new")]));
    expect(first.length).toBe(plaintext.length + 2 + 1 + 3 + 12 + 16);
    expect(first.subarray(6, 18).equals(second.subarray(6, 18))).toBe(false);
    expect(first.includes(plaintext)).toBe(false);
    expect(first.includes(text("distinctive"))).toBe(false);
    expect(cipher.open("c1", "message", first, where)).toEqual(plaintext);
    expect(cipher.open("c1", "message", cipher.seal("c1", "message", new Uint8Array(0)), where)).toEqual(Buffer.alloc(0));
  });

  it("draws distinct nonces across refills of its nonce buffer", () => {
    const nonces = new Set<string>();
    for (let index = 0; index < 1_000; index++) nonces.add(cipher.seal("c1", "rest", text("x")).subarray(6, 18).toString("hex"));
    expect(nonces.size).toBe(1_000);
  });

  it("refuses a value moved to another conversation or another kind of field: DATA_LOSS naming where, nothing decrypted", () => {
    const sealed = cipher.seal("c1", "message", text("hello"));
    const moved = connectError(() => cipher.open("c2", "message", sealed, where));
    expect(moved.code).toBe(Code.DataLoss);
    expect(moved.rawMessage).toBe(`conversation "c2" is corrupt in the store: message 4 of the history segment does not decrypt with key "new": it was changed, or belongs to another conversation or field`);
    expect(connectError(() => cipher.open("c1", "title", sealed, where)).code).toBe(Code.DataLoss);
  });

  it("refuses any changed byte of nonce, ciphertext or tag as DATA_LOSS; a changed key id as the key it now names", () => {
    const sealed = cipher.seal("c1", "change", text("some change record"));
    for (let position = 6; position < sealed.length; position++) {
      const tampered = Buffer.from(sealed);
      tampered[position]! ^= 0x01;
      expect(connectError(() => cipher.open("c1", "change", tampered, where)).code, `byte ${position}`).toBe(Code.DataLoss);
    }
    // "new" -> "old": a key that exists, but not the one that sealed it (the key id is authenticated data).
    const renamed = Buffer.from(sealed);
    renamed.write("old", 3, "ascii");
    expect(connectError(() => cipher.open("c1", "change", renamed, where)).rawMessage).toMatch(/does not decrypt with key "old"/);
    expect(connectError(() => cipher.open("c1", "change", sealed.subarray(0, 20), where)).rawMessage).toMatch(/is cut short: 20 bytes/);
  });

  it("refuses a value that is not sealed (written without encryption) as DATA_LOSS saying so", () => {
    const error = connectError(() => cipher.open("c1", "message", text("plain protobuf"), where));
    expect(error.code).toBe(Code.DataLoss);
    expect(error.rawMessage).toMatch(/message 4 of the history segment is not an encrypted value \(the sidecar runs with encryption at rest; was it written without\?\)/);
  });

  it("rotation: values sealed with an older key still open while it is listed; without it, FAILED_PRECONDITION naming the key id", () => {
    const before = new AtRestCipher([{ id: "old", key: keyB, tenant: "" }]);
    const sealedOld = before.seal("c1", "message", text("written before the rotation"));
    expect(cipher.open("c1", "message", sealedOld, where).toString()).toBe("written before the rotation");
    expect(cipher.seal("c1", "message", text("x")).subarray(3, 6).toString()).toBe("new");
    const rotatedOut = new AtRestCipher([{ id: "new", key: keyA, tenant: "" }]);
    const error = connectError(() => rotatedOut.open("c1", "message", sealedOld, where));
    expect(error.code).toBe(Code.FailedPrecondition);
    expect(error.rawMessage).toBe(
      `conversation "c1": message 4 of the history segment was encrypted with key "old", which the configured encryption keys (--encryption-key-file or CONTEXTD_ENCRYPTION_KEYS) do not list; add it back to read this value`,
    );
  });

  it("a key under the same id but other bytes (a wrong key) is DATA_LOSS, never garbage", () => {
    const wrong = new AtRestCipher([{ id: "new", key: Buffer.alloc(32, 0x99), tenant: "" }]);
    expect(connectError(() => wrong.open("c1", "message", cipher.seal("c1", "message", text("secret")), where)).code).toBe(Code.DataLoss);
  });

  it("per-tenant keys: a tenant's first key writes its conversations, the first untenanted key every other; another tenant's key is refused", () => {
    expect(cipher.writingKeyId("acme/c1")).toBe("acme-1");
    expect(cipher.writingKeyId("other/c1")).toBe("new");
    expect(cipher.writingKeyId("c1")).toBe("new");
    const sealed = cipher.seal("acme/c1", "message", text("acme's"));
    expect(sealed.subarray(3, 9).toString()).toBe("acme-1");
    expect(cipher.open("acme/c1", "message", sealed, where).toString()).toBe("acme's");
    // A tenant still reads what the untenanted key wrote before it got a key of its own.
    expect(cipher.open("acme/c2", "message", new AtRestCipher([{ id: "old", key: keyB, tenant: "" }]).seal("acme/c2", "message", text("before")), where).toString()).toBe("before");
    // acme's key id inside another tenant's value: refused before any decryption.
    const foreign = Buffer.from(sealed);
    const error = connectError(() => cipher.open("other/c1", "message", foreign, where));
    expect(error.code).toBe(Code.FailedPrecondition);
    expect(error.rawMessage).toMatch(/names key "acme-1", which is tenant "acme"'s, not this conversation's tenant's/);
  });

  it("reseal: a value copied to another conversation opens there, with the writing key of the target's tenant; without keys the bytes are the same", () => {
    const before = new AtRestCipher([{ id: "old", key: keyB, tenant: "" }]).seal("c1", "message", text("copied"));
    const copied = cipher.reseal("c1", "acme/fork", "message", before, where);
    expect(copied.subarray(3, 9).toString()).toBe("acme-1");
    expect(cipher.open("acme/fork", "message", copied, where).toString()).toBe("copied");
    expect(connectError(() => cipher.open("c1", "message", copied, where)).code).toBe(Code.FailedPrecondition);
    expect(connectError(() => cipher.reseal("c2", "c3", "message", before, where)).code).toBe(Code.DataLoss);
    const plain = text("as is");
    expect(plainValues.reseal("c1", "c2", "message", plain, where)).toEqual(plain);
  });

  it("opener: a read's values open as open opens them, each under the key it names, keys switching mid-list (a rotation) and ids of one length told apart", () => {
    const before = new AtRestCipher([{ id: "old", key: keyB, tenant: "" }]);
    // "new" and "old" have the same length: the opener must compare the id's bytes, not its length.
    const values = [before.seal("c1", "message", text("0 old")), cipher.seal("c1", "message", text("1 new")), cipher.seal("c1", "message", text("2 new")), before.seal("c1", "message", text("3 old"))];
    const open = cipher.opener("c1", "message");
    expect(values.map((value) => open(value, where).toString())).toEqual(["0 old", "1 new", "2 new", "3 old"]);
    expect(values.map((value) => cipher.open("c1", "message", value, where).toString())).toEqual(["0 old", "1 new", "2 new", "3 old"]);
    // A value the store handed over as a Uint8Array view (not a Buffer) opens the same.
    const view = new Uint8Array(values[1]!.buffer, values[1]!.byteOffset, values[1]!.byteLength);
    expect(open(view, where).toString()).toBe("1 new");
  });

  it("opener: bound to its conversation and kind; a bad value fails as open fails, and the values after it still open", () => {
    const open = cipher.opener("c1", "message");
    const good = cipher.seal("c1", "message", text("good"));
    expect(open(good, where).toString()).toBe("good");
    const tampered = Buffer.from(good);
    tampered[tampered.length - 1]! ^= 0x01;
    expect(connectError(() => open(tampered, where)).rawMessage).toBe(
      `conversation "c1" is corrupt in the store: message 4 of the history segment does not decrypt with key "new": it was changed, or belongs to another conversation or field`,
    );
    expect(connectError(() => open(cipher.seal("c2", "message", text("c2's")), where)).code).toBe(Code.DataLoss);
    expect(connectError(() => open(cipher.seal("c1", "rest", text("a rest")), where)).code).toBe(Code.DataLoss);
    expect(connectError(() => open(text("plain protobuf"), where)).rawMessage).toMatch(/is not an encrypted value/);
    // A tenant's key named inside another tenant's conversation, after that opener used an untenanted key.
    const acmes = cipher.seal("acme/c1", "message", text("acme's"));
    const other = cipher.opener("other/c1", "message");
    expect(other(cipher.seal("other/c1", "message", text("other's")), where).toString()).toBe("other's");
    expect(connectError(() => other(acmes, where)).code).toBe(Code.FailedPrecondition);
    expect(connectError(() => new AtRestCipher([{ id: "new", key: keyA, tenant: "" }]).opener("c1", "message")(new AtRestCipher([{ id: "old", key: keyB, tenant: "" }]).seal("c1", "message", text("x")), where)).code).toBe(Code.FailedPrecondition);
    expect(open(good, where).toString()).toBe("good");
  });

  it("opener with sealedBy: a value read through a link opens as its writer's, writers switching mid-list; as the reader's or another writer's it is DATA_LOSS naming the reader; a writer of another tenant is refused undecrypted", () => {
    const open = cipher.opener("acme/fork", "message");
    const [source, fork, other] = [cipher.seal("acme/source", "message", text("the source's")), cipher.seal("acme/fork", "message", text("the fork's")), cipher.seal("acme/other", "message", text("another's"))];
    // A read's rows in position order: shared rows of the source, the fork's own, the source's again.
    expect([open(source, where, "acme/source"), open(fork, where), open(source, where, "acme/source"), open(fork, where, "acme/fork")].map(String)).toEqual(["the source's", "the fork's", "the source's", "the fork's"]);
    expect(connectError(() => open(source, where)).rawMessage).toBe(
      `conversation "acme/fork" is corrupt in the store: message 4 of the history segment does not decrypt with key "acme-1": it was changed, or belongs to another conversation or field`,
    );
    expect(connectError(() => open(other, where, "acme/source")).rawMessage).toBe(
      `conversation "acme/fork" is corrupt in the store: message 4 of the history segment does not decrypt with key "acme-1" as conversation "acme/source"'s, whose rows it links: it was changed, or belongs to another conversation or field`,
    );
    expect(connectError(() => open(fork, where, "beta/source")).rawMessage).toBe(
      `conversation "acme/fork" is corrupt in the store: message 4 of the history segment is read through a link to rows of conversation "beta/source", of another tenant: no fork links those`,
    );
    expect(plainValues.opener("acme/fork", "message")(text("as is"), where, "acme/source").toString()).toBe("as is");
  });

  it("storedValuesOf: no keys = the bytes as they are", () => {
    expect(storedValuesOf([])).toBe(plainValues);
    expect(plainValues.open("c1", "message", plainValues.seal("c1", "message", text("as is")), where).toString()).toBe("as is");
    expect(plainValues.opener("c1", "message")(text("as is"), where).toString()).toBe("as is");
    expect(storedValuesOf(keys).encrypts).toBe(true);
  });
});
