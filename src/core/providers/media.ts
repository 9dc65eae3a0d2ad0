import type { FilePart, ImagePart } from "#gen/contextd/v1/message_pb";

/** Standard base64 of raw bytes (what every provider expects for inline media). */
export function base64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

/** The image as one URL: its `url`, or a base64 data URL built from `data` + `mime_type`. */
export function imageUrl(image: ImagePart): string {
  if (image.url !== "") return image.url;
  return `data:${image.mimeType};base64,${base64(image.data)}`;
}

/** The file's inline bytes as a base64 data URL (OpenAI `file_data`). */
export function fileDataUrl(file: FilePart): string {
  return `data:${file.mimeType};base64,${base64(file.data)}`;
}

/** Inline media: a media type and base64 data. */
export interface InlineMedia {
  mimeType: string;
  base64: string;
}

/**
 * The inline bytes of an image, from `data` or from a base64 `data:` URL; undefined for an http(s)
 * URL. Anthropic and Gemini take inline images as separate media type + data fields, so data URLs
 * that OpenAI accepts as-is are split for them.
 */
export function inlineImage(image: ImagePart): InlineMedia | undefined {
  if (image.url === "") return { mimeType: image.mimeType, base64: base64(image.data) };
  return parseBase64DataUrl(image.url);
}

function parseBase64DataUrl(url: string): InlineMedia | undefined {
  const match = /^data:([^;,]+);base64,(.*)$/s.exec(url);
  if (!match) return undefined;
  return { mimeType: match[1]!, base64: match[2]! };
}
