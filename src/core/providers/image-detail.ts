import { ImageDetail } from "#gen/contextd/v1/message_pb";

/** OpenAI's `detail` for an image; undefined = let the provider default apply. */
export function openAIImageDetail(detail: ImageDetail): "auto" | "low" | "high" | undefined {
  switch (detail) {
    case ImageDetail.AUTO:
      return "auto";
    case ImageDetail.LOW:
      return "low";
    case ImageDetail.HIGH:
      return "high";
    default:
      return undefined;
  }
}
