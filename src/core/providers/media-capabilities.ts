import { create } from "@bufbuild/protobuf";
import { WarningSchema, type Warning } from "#gen/contextd/v1/compile_pb";
import type { FilePart, ImagePart, Message } from "#gen/contextd/v1/message_pb";
import { atMessage, providerRuleViolation } from "./rule-violation.js";

/** The providers of the table, by their rule-name prefix. */
export type MediaProvider = "openai_chat" | "openai_responses" | "anthropic" | "gemini";

/** How a body carries media: a public http(s) URL, inline bytes, or an id the provider issued on upload. */
export type MediaForm = "url" | "inline" | "uploaded";

const providerNames: Record<MediaProvider, string> = {
  openai_chat: "OpenAI Chat Completions",
  openai_responses: "OpenAI Responses",
  anthropic: "Anthropic Messages",
  gemini: "Gemini",
};

const webImages = ["image/png", "image/jpeg", "image/gif", "image/webp"];
/** Gemini's documented image, document, audio and video types for inline data and file URIs. */
const geminiTypes = [
  "image/png", "image/jpeg", "image/webp", "image/heic", "image/heif",
  "application/pdf", "text/plain",
  "audio/wav", "audio/mp3", "audio/mpeg", "audio/aiff", "audio/aac", "audio/ogg", "audio/flac",
  "video/mp4", "video/mpeg", "video/mov", "video/avi", "video/x-flv", "video/mpg", "video/webm", "video/wmv", "video/3gpp",
];

/**
 * The one table of which media types each API takes in which form (docs/provider-media.md says the
 * same, with sources). `"*"` takes any type (an uploaded id: the provider checked its type on
 * upload). Images and files are separate rows: their request shapes differ.
 *
 * Inline `text/plain` files are not in OpenAI's rows: they are sent as a text part instead (no
 * information is lost), see `mediaPlan`.
 */
export const mediaCapabilities: Record<MediaProvider, Record<"image" | "file", Partial<Record<MediaForm, readonly string[]>>>> = {
  // Chat Completions: images by URL or data URL; files only as PDF, inline (`file_data`) or an
  // uploaded `file_id`, never by URL.
  openai_chat: {
    image: { url: webImages, inline: webImages },
    file: { inline: ["application/pdf"], uploaded: ["*"] },
  },
  // Responses: images by URL or data URL; PDF files by URL (`file_url`), inline (`file_data` with
  // `filename`) or uploaded `file_id`.
  openai_responses: {
    image: { url: webImages, inline: webImages },
    file: { url: ["application/pdf"], inline: ["application/pdf"], uploaded: ["*"] },
  },
  // Messages: images by URL or base64; documents: PDF by URL or base64, plain text inline.
  // Uploaded file ids need the Files API beta header, which contextd does not send.
  anthropic: {
    image: { url: webImages, inline: webImages },
    file: { url: ["application/pdf"], inline: ["application/pdf", "text/plain"] },
  },
  // Gemini: `inlineData` and `fileData.fileUri` (Files API URIs, and http(s) URLs) for its types;
  // images by URL go as `fileData` too.
  gemini: {
    image: { url: geminiTypes, inline: geminiTypes },
    file: { url: geminiTypes, inline: geminiTypes, uploaded: geminiTypes },
  },
};

/** What to do with a media part whose type or form a provider does not take. */
export interface MediaPolicy {
  /** `RenderOptions.drop_unsupported_media`: leave the part out with a warning instead of refusing. */
  drop: boolean;
  report: (warning: Warning) => void;
}

/** The form of a file part: inline bytes, a URL, or a provider's upload id. */
export function fileForm(file: FilePart): MediaForm {
  if (file.uri === "") return "inline";
  return /^https?:\/\//.test(file.uri) ? "url" : "uploaded";
}

/** The form and media type of an image part (a data: URL is inline). */
export function imageForm(image: ImagePart): { form: MediaForm; mimeType: string } {
  if (image.url === "") return { form: "inline", mimeType: image.mimeType };
  const data = /^data:([^;,]+);base64,/.exec(image.url);
  if (data) return { form: "inline", mimeType: data[1]! };
  return { form: "url", mimeType: image.mimeType };
}

function takes(provider: MediaProvider, kind: "image" | "file", form: MediaForm, mimeType: string): boolean {
  const types = mediaCapabilities[provider][kind][form];
  if (!types) return false;
  if (types.includes("*")) return true;
  // An image by URL often comes without a type; the provider reads it from the response.
  if (mimeType === "" && kind === "image" && form === "url") return true;
  return types.includes(mimeType);
}

/** What a renderer does with one media part. */
export type MediaPlan = { send: true } | { send: false; text: string } | { send: false; text?: undefined };

/**
 * Checks one image or file part against the table. `send` when the provider takes it as it is;
 * `text` when it becomes a text part without loss (an inline `text/plain` file for a provider
 * without plain-text documents); otherwise FAILED_PRECONDITION `<provider>.media_type` naming
 * the message, the part and the provider, or with `policy.drop` a `media_dropped` warning and
 * nothing sent.
 */
export function mediaPlan(provider: MediaProvider, message: Message, index: number, part: { kind: "image"; image: ImagePart } | { kind: "file"; file: FilePart }, policy: MediaPolicy): MediaPlan {
  const { form, mimeType } = part.kind === "image" ? imageForm(part.image) : { form: fileForm(part.file), mimeType: part.file.mimeType };
  if (takes(provider, part.kind, form, mimeType)) return { send: true };
  if (part.kind === "file" && form === "inline" && mimeType === "text/plain") {
    const text = decodedText(part.file.data);
    if (text !== undefined) return { send: false, text: part.file.name !== "" ? `${part.file.name}:\n${text}` : text };
  }
  const what = `part ${index} (${part.kind}, ${mimeType || "no media type"}, ${form === "uploaded" ? "uploaded id" : form})`;
  const accepted = acceptedForms(provider, part.kind);
  const detail = `${what}: ${providerNames[provider]} takes ${part.kind}s ${accepted}`;
  if (!policy.drop) throw providerRuleViolation(`${provider}.media_type`, atMessage(message.id), `${detail}; set render.drop_unsupported_media to leave such parts out`);
  policy.report(create(WarningSchema, { code: "media_dropped", message: `message "${message.id}" ${detail}; the part was not sent` }));
  return { send: false };
}

function acceptedForms(provider: MediaProvider, kind: "image" | "file"): string {
  const rows = Object.entries(mediaCapabilities[provider][kind]).map(([form, types]) => `${form === "uploaded" ? "as an uploaded id" : form === "url" ? "by URL" : "inline"} (${typeList(types)})`);
  return rows.join("; ");
}

function typeList(types: readonly string[]): string {
  if (types.includes("*")) return "any type";
  return types.length <= 6 ? types.join(", ") : `${types.slice(0, 5).join(", ")} and ${types.length - 5} more, docs/provider-media.md`;
}

/** UTF-8 text of the bytes, or undefined when they are not valid UTF-8 (then it is not lossless). */
function decodedText(bytes: Uint8Array): string | undefined {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

/** The file name sent where a provider requires one (`filename` of OpenAI inline files). */
export function fileName(file: FilePart, messageId: string, index: number): string {
  if (file.name !== "") return file.name;
  const extension = file.mimeType === "application/pdf" ? ".pdf" : "";
  return `${messageId}-part${index}${extension}`;
}
