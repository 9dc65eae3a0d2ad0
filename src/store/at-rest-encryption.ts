import { Code, ConnectError } from "@connectrpc/connect";
import { createCipheriv, createDecipheriv, createSecretKey, randomFillSync, type KeyObject } from "node:crypto";
import { tenantOf } from "../core/model/conversation-tenant.js";
import { stringLimits } from "../core/model/string-limits.js";
import { corruptConversation } from "./store-errors.js";

/**
 * Encryption at rest: what the Redis and Postgres stores write of a conversation's contents
 * (message entries, the state's rest, the change Watch serves, the title and labels) goes out as
 * AES-256-GCM ciphertext, and comes back through `open`. Why it exists: the stores' one seam for
 * the bytes they keep (`StoredCopies`, the change feeds, the listing fields) takes a
 * `StoredValues`, so the stores stay the same with encryption on or off (`plainValues`).
 *
 * A sealed value: `0xce 0x01`, the key id's length (1 byte) and ASCII, a 12-byte random nonce,
 * the ciphertext, the 16-byte tag. The additional authenticated data binds it to where it belongs:
 * `contextd at rest 1`, the kind of value, the key id and the conversation id (UTF-8), each
 * followed by a NUL. So a value copied to another conversation, or into another kind of field,
 * fails to open (DATA_LOSS), as does any changed byte. A copy of stored values to another
 * conversation must open them with the source's id and seal them with the new one's (`reseal`):
 * one decryption and one encryption per value copied, none without keys. A fork that *shares*
 * its source's message rows (Postgres migration 17) copies nothing: each shared value stays
 * sealed for the conversation that wrote it, and a reader opens it as that conversation's
 * (`ValueOpener`'s `sealedBy`, named by the storage it is read from), of the same tenant only.
 */

/** What a sealed value is, bound into its authenticated data: a value never opens as another kind. */
export type SealedKind = "message" | "rest" | "change" | "title" | "labels";

/** The bytes a store keeps of a conversation's contents, sealed or as they are. */
export interface StoredValues {
  /** True when values are encrypted (the stores then also seal titles and labels). */
  readonly encrypts: boolean;
  /** The bytes to store for `plaintext`, a value of `kind` of the conversation. */
  seal(conversationId: string, kind: SealedKind, plaintext: Uint8Array): Buffer;
  /**
   * The plaintext of a stored value. DATA_LOSS naming `where` when it is not a sealed value of
   * this conversation and kind, or was changed; FAILED_PRECONDITION naming the key id when the
   * key that sealed it is not configured (or belongs to another tenant).
   */
  open(conversationId: string, kind: SealedKind, stored: Uint8Array, where: () => string): Buffer;
  /**
   * A stored value of conversation `from` as conversation `to` must store it (a copy, a fork):
   * the same bytes without encryption; opened and sealed again with it, since the conversation
   * id is bound into every sealed value. Fails as `open` does.
   */
  reseal(from: string, to: string, kind: SealedKind, stored: Uint8Array, where: () => string): Buffer;
  /**
   * `open` for many values of one conversation and kind (a read's list of entries): what they
   * share, the key named and the authenticated data, is worked out once per key id instead of
   * once per value. Fails as `open` does, value by value.
   */
  opener(conversationId: string, kind: SealedKind): ValueOpener;
}

/**
 * Opens one stored value of the conversation and kind a `StoredValues.opener` was made for.
 * `sealedBy`, when given, is the conversation that sealed it: a value the conversation reads
 * through a link of its header to rows another conversation wrote (a fork's source's), which
 * stays sealed for its writer. The writer must be of the reader's tenant (else DATA_LOSS), and
 * errors name the reader.
 */
export type ValueOpener = (stored: Uint8Array, where: () => string, sealedBy?: string) => Buffer;

const viewOf = (bytes: Uint8Array): Buffer => (Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));

/** Without encryption: the bytes as they are. */
export const plainValues: StoredValues = {
  encrypts: false,
  seal: (_conversationId, _kind, plaintext) => viewOf(plaintext),
  open: (_conversationId, _kind, stored) => viewOf(stored),
  reseal: (_from, _to, _kind, stored) => viewOf(stored),
  opener: () => viewOf,
};

/** One configured key: its id (stored with every value it seals), its 32 bytes, and its tenant ("" = every conversation's). */
export interface AtRestKey {
  id: string;
  key: Buffer;
  tenant: string;
}

const formatMarker = 0xce;
const formatVersion = 0x01;
const nonceBytes = 12;
const tagBytes = 16;
const keyIdPattern = /^[A-Za-z0-9._-]{1,64}$/;
const tenantPattern = /^[A-Za-z0-9._-]+$/;
/** Keys one configuration may list: each is held by every sidecar process for as long as it runs. */
export const maxEncryptionKeys = 1_000;
/** Nonces are drawn from a buffer refilled this many at a time: one `randomFillSync` per 256 values, not per value. */
const noncesPerFill = 256;
/** One options object for every cipher, not one per value: node only reads it (frozen, so nothing can change it for the next). */
const gcmOptions = Object.freeze({ authTagLength: tagBytes });

/**
 * Keys separated by newlines or commas, each `[tenant/]key-id:key` with the key as 32 bytes in
 * base64 (or 64 hex digits); `#` starts a comment line. The first key listed for every
 * conversation (no tenant) writes; the first listed for a tenant writes that tenant's
 * conversations; every key listed reads. Throws naming `where`, the entry and what is wrong.
 */
export function parseEncryptionKeys(text: string, where: string): AtRestKey[] {
  const keys: AtRestKey[] = [];
  const ids = new Set<string>();
  text.split(/[,\n]/).forEach((raw, index) => {
    const entry = raw.trim();
    if (entry === "" || entry.startsWith("#")) return;
    const colon = entry.indexOf(":");
    const name = `entry ${index + 1} of ${where}`;
    if (colon < 0) throw new Error(`invalid ${name}: want [tenant/]key-id:key (the key as 32 bytes in base64 or 64 hex digits)`);
    const scoped = entry.slice(0, colon).trim();
    const slash = scoped.indexOf("/");
    const tenant = slash < 0 ? "" : scoped.slice(0, slash);
    const id = slash < 0 ? scoped : scoped.slice(slash + 1);
    if (slash >= 0 && (!tenantPattern.test(tenant) || tenant.length > stringLimits.tenant)) {
      throw new Error(`invalid tenant "${tenant.slice(0, 32)}" in ${name}: want 1 to ${stringLimits.tenant} letters, digits, ".", "_" or "-"`);
    }
    if (!keyIdPattern.test(id)) throw new Error(`invalid key id "${id.slice(0, 80)}" in ${name}: want 1 to 64 letters, digits, ".", "_" or "-"`);
    if (ids.has(id)) throw new Error(`key id "${id}" is listed twice in ${where}: a stored value names its key by id, so ids must be unique`);
    const material = entry.slice(colon + 1).trim();
    const key = /^[0-9a-fA-F]{64}$/.test(material) ? Buffer.from(material, "hex") : /^[A-Za-z0-9+/]{43}=?$/.test(material) ? Buffer.from(material, "base64") : undefined;
    if (key === undefined || key.length !== 32) {
      throw new Error(`invalid key "${id}" in ${name}: want 32 bytes (AES-256) as base64 (44 characters) or 64 hex digits, e.g. from \`openssl rand -base64 32\``);
    }
    ids.add(id);
    keys.push({ id, key, tenant });
    if (keys.length > maxEncryptionKeys) throw new Error(`${where} lists more than ${maxEncryptionKeys} keys, the most one sidecar takes: retire keys no stored value names any more`);
  });
  if (keys.length === 0) throw new Error(`${where} lists no key: want at least one key-id:key line`);
  if (!keys.some((key) => key.tenant === "")) {
    throw new Error(`${where} lists only tenants' keys: want a key without a tenant too, for conversations of other tenants (the first such key writes)`);
  }
  return keys;
}

/** A key as an opener holds it: the value's key id bytes (length byte and ASCII) that name it, and the authenticated data of the opener's conversation and kind under it. */
interface ReadingKey {
  /** The conversation whose id the authenticated data binds: the reader's, or the writer it reads through a link (`ValueOpener`). */
  sealer: string;
  idBytes: Buffer;
  id: string;
  secret: KeyObject;
  additional: Buffer;
}

/** AES-256-GCM over the configured keys (see the top of this file for the format and what it binds). */
export class AtRestCipher implements StoredValues {
  readonly encrypts = true;
  /** Keys as KeyObjects: a cipher made from one skips copying and checking the raw bytes (open took ~7 µs instead of ~11 µs here). */
  private readonly byId = new Map<string, { id: string; tenant: string; secret: KeyObject }>();
  /** The key that seals: per tenant with keys of its own, and "" for every other conversation. */
  private readonly writers = new Map<string, { id: string; secret: KeyObject; header: Buffer }>();
  private readonly nonces = Buffer.alloc(nonceBytes * noncesPerFill);
  private noncesUsed = noncesPerFill;

  constructor(keys: readonly AtRestKey[]) {
    for (const key of keys) {
      if (key.key.length !== 32) throw new Error(`encryption key "${key.id}" has ${key.key.length} bytes, not 32`);
      const secret = createSecretKey(key.key);
      this.byId.set(key.id, { id: key.id, tenant: key.tenant, secret });
      if (!this.writers.has(key.tenant)) this.writers.set(key.tenant, { id: key.id, secret, header: Buffer.from([formatMarker, formatVersion, key.id.length, ...Buffer.from(key.id, "ascii")]) });
    }
    if (!this.writers.has("")) throw new Error("encryption needs a key without a tenant");
  }

  /** The id of the key that seals the conversation's values now. */
  writingKeyId(conversationId: string): string {
    return this.writerOf(conversationId).id;
  }

  seal(conversationId: string, kind: SealedKind, plaintext: Uint8Array): Buffer {
    const writer = this.writerOf(conversationId);
    const { header } = writer;
    // One allocation for the whole value: header, nonce, ciphertext (GCM's is as long as the plaintext), tag.
    const sealed = Buffer.allocUnsafe(header.length + nonceBytes + plaintext.length + tagBytes);
    header.copy(sealed, 0);
    const nonce = this.nextNonce(sealed, header.length);
    const cipher = createCipheriv("aes-256-gcm", writer.secret, nonce, gcmOptions);
    cipher.setAAD(additionalData(kind, writer.id, conversationId));
    let offset = header.length + nonceBytes;
    offset += cipher.update(plaintext).copy(sealed, offset);
    offset += cipher.final().copy(sealed, offset);
    cipher.getAuthTag().copy(sealed, offset);
    return sealed;
  }

  open(conversationId: string, kind: SealedKind, stored: Uint8Array, where: () => string): Buffer {
    return this.opener(conversationId, kind)(stored, where);
  }

  opener(conversationId: string, kind: SealedKind): ValueOpener {
    // The key the last value named, with the authenticated data for it: a read's values almost
    // always name one key, so each further value costs a compare of its key id's bytes.
    let last: ReadingKey | undefined;
    return (stored, where, sealedBy = conversationId) => {
      const bytes = viewOf(stored);
      if (bytes.length < 3 || bytes[0] !== formatMarker || bytes[1] !== formatVersion) {
        throw corruptConversation(conversationId, `${where()} is not an encrypted value (the sidecar runs with encryption at rest; was it written without?)`);
      }
      const idLength = bytes[2]!;
      const bodyStart = 3 + idLength + nonceBytes;
      if (bytes.length < bodyStart + tagBytes) throw corruptConversation(conversationId, `${where()} is cut short: ${bytes.length} bytes, an encrypted value has at least ${bodyStart + tagBytes}`);
      if (last === undefined || last.sealer !== sealedBy || !namesKey(bytes, last.idBytes)) last = this.readingKey(conversationId, sealedBy, kind, bytes, where);
      const decipher = createDecipheriv("aes-256-gcm", last.secret, bytes.subarray(3 + idLength, bodyStart), gcmOptions);
      decipher.setAAD(last.additional);
      decipher.setAuthTag(bytes.subarray(bytes.length - tagBytes));
      const body = decipher.update(bytes.subarray(bodyStart, bytes.length - tagBytes));
      try {
        const end = decipher.final();
        return end.length === 0 ? body : Buffer.concat([body, end]);
      } catch {
        const as = last.sealer === conversationId ? "" : ` as conversation "${last.sealer}"'s, whose rows it links`;
        throw corruptConversation(conversationId, `${where()} does not decrypt with key "${last.id}"${as}: it was changed, or belongs to another conversation or field`);
      }
    };
  }

  /** The configured key the sealed value `bytes` names, with what an opener keeps of it; FAILED_PRECONDITION when it is not listed or is another tenant's. */
  private readingKey(conversationId: string, sealer: string, kind: SealedKind, bytes: Buffer, where: () => string): ReadingKey {
    // A link to another tenant's rows was never written by a fork (forks that share are
    // same-tenant): opening them would let whoever can write the store show one tenant's
    // messages through another tenant's conversation.
    if (sealer !== conversationId && tenantOf(sealer) !== tenantOf(conversationId)) {
      throw corruptConversation(conversationId, `${where()} is read through a link to rows of conversation "${sealer}", of another tenant: no fork links those`);
    }
    const idLength = bytes[2]!;
    const id = bytes.toString("latin1", 3, 3 + idLength);
    const key = this.byId.get(id);
    if (key === undefined) {
      throw new ConnectError(
        `conversation "${conversationId}": ${where()} was encrypted with key "${id.replace(/[^\x20-\x7e]/g, "?")}", which the configured encryption keys (--encryption-key-file or CONTEXTD_ENCRYPTION_KEYS) do not list; add it back to read this value`,
        Code.FailedPrecondition,
      );
    }
    if (key.tenant !== "" && key.tenant !== tenantOf(conversationId)) {
      throw new ConnectError(`conversation "${conversationId}": ${where()} names key "${id}", which is tenant "${key.tenant}"'s, not this conversation's tenant's`, Code.FailedPrecondition);
    }
    return { sealer, idBytes: Buffer.from(bytes.subarray(2, 3 + idLength)), id, secret: key.secret, additional: additionalData(kind, id, sealer) };
  }

  reseal(from: string, to: string, kind: SealedKind, stored: Uint8Array, where: () => string): Buffer {
    return this.seal(to, kind, this.open(from, kind, stored, where));
  }

  private writerOf(conversationId: string): { id: string; secret: KeyObject; header: Buffer } {
    if (this.writers.size > 1) {
      const tenant = tenantOf(conversationId);
      const own = tenant === "" ? undefined : this.writers.get(tenant);
      if (own) return own;
    }
    return this.writers.get("")!;
  }

  /** The next nonce, written into `into` at `offset` (the value being sealed) and returned as that view. */
  private nextNonce(into: Buffer, offset: number): Buffer {
    if (this.noncesUsed === noncesPerFill) {
      randomFillSync(this.nonces);
      this.noncesUsed = 0;
    }
    this.nonces.copy(into, offset, this.noncesUsed * nonceBytes, (this.noncesUsed + 1) * nonceBytes);
    this.noncesUsed++;
    return into.subarray(offset, offset + nonceBytes);
  }
}

/** Whether the sealed value `bytes` names the key whose id's length byte and ASCII are `idBytes`. */
function namesKey(bytes: Buffer, idBytes: Buffer): boolean {
  for (let index = 0; index < idBytes.length; index++) if (bytes[2 + index] !== idBytes[index]) return false;
  return true;
}

function additionalData(kind: SealedKind, keyId: string, conversationId: string): Buffer {
  return Buffer.from(`contextd at rest 1\0${kind}\0${keyId}\0${conversationId}\0`, "utf8");
}

/** The stored values for a configuration's keys: none = as they are. */
export function storedValuesOf(keys: readonly AtRestKey[]): StoredValues {
  return keys.length === 0 ? plainValues : new AtRestCipher(keys);
}
