import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, RedactionPattern } from "#gen/contextd/v1/compile_pb";
import { compile } from "../../src/core/compile/compile.js";
import { messageText } from "../../src/core/model/message-text.js";
import { testContext } from "./compile-context.js";
import { user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

type HookKind = NonNullable<NonNullable<NonNullable<Parameters<typeof create<typeof CompileRequestSchema>>[1]>["hooks"]>[number]["kind"]>;

/** History `text` through one redaction hook; the redacted payload text. */
async function redacted(text: string, value: HookKind): Promise<string> {
  const request = create(CompileRequestSchema, { history: { messages: [user("u1", text)] }, hooks: [{ kind: value }] });
  const result = await compile(request, testContext());
  return messageText(result.payload!.history[0]!);
}

const custom = (regex: string, replacement = "") => ({ case: "redaction" as const, value: { customPatterns: [{ name: "secret", regex }], replacement } });
const builtIn = (...patterns: RedactionPattern[]) => ({ case: "redaction" as const, value: { patterns } });

// The backtracking engine took 16 s on 30 "a" + "!" and doubled per character; each case below
// runs a text where the old code takes far longer than the vitest timeout of 10 s.
describe("request-supplied redaction regexes run in linear time (re2js)", () => {
  it("answers (a+)+$ over 30 and over 100,000 a's followed by !", { timeout: 10_000 }, async () => {
    expect(await redacted("a".repeat(30) + "!", custom("(a+)+$"))).toBe("a".repeat(30) + "!");
    expect(await redacted("a".repeat(100_000) + "!", custom("(a+)+$"))).toBe("a".repeat(100_000) + "!");
    expect(await redacted("key aaaa", custom("(a+)+$"))).toBe("key [REDACTED:secret]");
  });

  it("uses the replacement literally ($ has no meaning there)", async () => {
    expect(await redacted("id 1234 and 99", custom("[0-9]+", "<$&>"))).toBe("id <$&> and <$&>");
  });

  it("refuses patterns RE2 cannot run in linear time, naming the pattern", async () => {
    for (const regex of ["(a)\\1", "(?<=x)a", "a(?!b)"]) {
      await rejectsWith(
        compile(create(CompileRequestSchema, { hooks: [{ kind: custom(regex) }] }), testContext()),
        Code.InvalidArgument,
        /^hooks\[0\]\.redaction\.custom_patterns\[0\]\.regex is not a valid regular expression for RE2, which has no backreferences or lookaround: .+`/,
      );
    }
    await rejectsWith(
      compile(create(CompileRequestSchema, { hooks: [{ kind: custom("x*") }] }), testContext()),
      Code.InvalidArgument,
      /^hooks\[0\]\.redaction\.custom_patterns\[0\]\.regex matches the empty string: "x\*"$/,
    );
  });
});

describe("built-in redaction patterns are linear", () => {
  // 400 KB each: quadratic patterns need minutes here (the old EMAIL took 0.39 s on 20 KB of hex,
  // so ~150 s on 400 KB).
  const size = 400_000;
  const hex = Array.from({ length: size }, (_, index) => "0123456789abcdef"[(index * 7 + 3) % 16]).join("");
  const adversarial: [string, string][] = [
    ["hex", hex],
    ["dots", ".".repeat(size)],
    ["at signs", "@".repeat(size)],
    ["digits", "1".repeat(size)],
    ["digits and spaces", "1 ".repeat(size / 2)],
    ["local part, no domain", "a.".repeat(size / 2) + "@"],
    ["domain without a top-level label", "a@" + "b.".repeat(size / 2)],
    ["colons", "1:".repeat(size / 2)],
    ["double colons", "1::".repeat(size / 3)],
    ["dashes after a key prefix", "-sk-" + "-".repeat(size)],
    ["bearer and spaces", "Bearer" + " ".repeat(size)],
    ["plus signs and digits", "+1 ".repeat(size / 3)],
  ];
  for (const [name, text] of adversarial) {
    it(`runs every built-in pattern over 400 KB of ${name}`, { timeout: 10_000 }, async () => {
      const all = builtIn(RedactionPattern.API_KEY, RedactionPattern.EMAIL, RedactionPattern.CARD_NUMBER, RedactionPattern.IP_ADDRESS, RedactionPattern.PHONE);
      // None of these texts holds an address, number or key: the answer is the text unchanged.
      expect(await redacted(text, all)).toBe(text);
    });
  }

  it("still finds what it finds in ordinary text", async () => {
    const all = builtIn(RedactionPattern.API_KEY, RedactionPattern.EMAIL, RedactionPattern.CARD_NUMBER, RedactionPattern.IP_ADDRESS, RedactionPattern.PHONE);
    expect(await redacted("mail jane.doe+x@mail.example.co.uk, not jane@localhost", all)).toBe("mail [REDACTED:email], not jane@localhost");
    expect(await redacted("from 10.0.0.1 and fe80::1 via ::", all)).toBe("from [REDACTED:ip_address] and [REDACTED:ip_address] via ::");
    expect(await redacted("key sk-abcdefghijklmnop1234 ok", all)).toBe("key [REDACTED:api_key] ok");
  });
});
