package contextd

import (
	"fmt"

	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// TextMessage is a message with one text part and no id (the server or the compile's identity
// policy assigns one).
func TextMessage(role contextdv1.Role, text string) *contextdv1.Message {
	return &contextdv1.Message{Role: role, Parts: []*contextdv1.Part{TextPart(text)}}
}

// UserText is a USER text message.
func UserText(text string) *contextdv1.Message { return TextMessage(contextdv1.Role_ROLE_USER, text) }

// AssistantText is an ASSISTANT text message.
func AssistantText(text string) *contextdv1.Message {
	return TextMessage(contextdv1.Role_ROLE_ASSISTANT, text)
}

// SystemText is a SYSTEM text message.
func SystemText(text string) *contextdv1.Message {
	return TextMessage(contextdv1.Role_ROLE_SYSTEM, text)
}

// TextPart is a text part.
func TextPart(text string) *contextdv1.Part {
	return &contextdv1.Part{Kind: &contextdv1.Part_Text{Text: &contextdv1.TextPart{Text: text}}}
}

// ToolCall is a call of the tool name with arguments given as the JSON text of an object.
func ToolCall(id, name, argumentsJSON string) *contextdv1.ToolCallPart {
	return &contextdv1.ToolCallPart{Id: id, Name: name, Arguments: JSONPayload(argumentsJSON)}
}

// TextPayload is a tool payload holding text.
func TextPayload(text string) *contextdv1.ToolPayload { return &contextdv1.ToolPayload{Text: text} }

// JSONPayload is a tool payload holding a JSON value as JSON text.
func JSONPayload(json string) *contextdv1.ToolPayload { return &contextdv1.ToolPayload{Data: json} }

// ErrorPayload is a tool payload describing a failure.
func ErrorPayload(code, message string) *contextdv1.ToolPayload {
	return &contextdv1.ToolPayload{Error: &contextdv1.ToolError{Code: code, Message: message}}
}

// ToolResultMessage is the TOOL message answering one call.
func ToolResultMessage(callID, name string, payload *contextdv1.ToolPayload, isError bool) *contextdv1.Message {
	result := &contextdv1.ToolResultPart{ToolCallId: callID, Name: name, Payload: payload, IsError: isError}
	return &contextdv1.Message{
		Role:  contextdv1.Role_ROLE_TOOL,
		Parts: []*contextdv1.Part{{Kind: &contextdv1.Part_ToolResult{ToolResult: result}}},
	}
}

// ToolRound builds one assistant turn that calls tools (in parallel when there are several) and
// the results answering them, so the round can be stored or sent as a unit.
type ToolRound struct {
	assistant *contextdv1.Message
	calls     []*contextdv1.ToolCallPart
	results   map[string]*contextdv1.Message
}

// NewToolRound starts a round: the assistant says text (may be empty) and makes calls.
func NewToolRound(text string, calls ...*contextdv1.ToolCallPart) *ToolRound {
	assistant := &contextdv1.Message{Role: contextdv1.Role_ROLE_ASSISTANT}
	if text != "" {
		assistant.Parts = append(assistant.Parts, TextPart(text))
	}
	for _, call := range calls {
		assistant.Parts = append(assistant.Parts, &contextdv1.Part{Kind: &contextdv1.Part_ToolCall{ToolCall: call}})
	}
	return &ToolRound{assistant: assistant, calls: calls, results: map[string]*contextdv1.Message{}}
}

// Answer records the result of the call with callID; a later answer to the same call replaces
// an earlier one.
func (r *ToolRound) Answer(callID string, payload *contextdv1.ToolPayload, isError bool) *ToolRound {
	r.results[callID] = ToolResultMessage(callID, r.findCall(callID).GetName(), payload, isError)
	return r
}

// Messages returns the assistant message followed by one TOOL message per call, in call order.
// It fails when a call has no answer or an answer has no call, since providers reject such a
// round.
func (r *ToolRound) Messages() ([]*contextdv1.Message, error) {
	for callID := range r.results {
		if r.findCall(callID) == nil {
			return nil, fmt.Errorf("contextd: tool round: result for unknown call %q", callID)
		}
	}
	messages := []*contextdv1.Message{r.assistant}
	for _, call := range r.calls {
		result, ok := r.results[call.GetId()]
		if !ok {
			return nil, fmt.Errorf("contextd: tool round: call %q (%s) has no result", call.GetId(), call.GetName())
		}
		messages = append(messages, result)
	}
	return messages, nil
}

func (r *ToolRound) findCall(callID string) *contextdv1.ToolCallPart {
	for _, call := range r.calls {
		if call.GetId() == callID {
			return call
		}
	}
	return nil
}

// Delta returns the round as an append_tool_round delta.
func (r *ToolRound) Delta() (*contextdv1.Delta, error) {
	messages, err := r.Messages()
	if err != nil {
		return nil, err
	}
	return &contextdv1.Delta{Operation: &contextdv1.Delta_AppendToolRound{
		AppendToolRound: &contextdv1.AppendToolRound{Assistant: messages[0], Results: messages[1:]},
	}}, nil
}

// AppendUser is a delta appending a user message to history.
func AppendUser(message *contextdv1.Message) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_AppendUser{AppendUser: &contextdv1.AppendUser{Message: message}}}
}

// AppendAssistant is a delta appending an assistant turn (text and/or calls, which open a tool
// round) to history.
func AppendAssistant(text string, calls ...*contextdv1.ToolCallPart) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_AppendAssistant{
		AppendAssistant: &contextdv1.AppendAssistant{Text: text, ToolCalls: calls},
	}}
}

// AppendToolResult is a delta answering one open call of the last assistant turn.
func AppendToolResult(callID, name string, payload *contextdv1.ToolPayload, isError bool) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_AppendToolResult{
		AppendToolResult: &contextdv1.AppendToolResult{ToolCallId: callID, Name: name, Payload: payload, IsError: isError},
	}}
}

// AppendProviderResponse is a delta appending a provider's non-streaming response body, as
// received, as ASSISTANT messages (text, tool calls, reasoning): the sidecar parses it (provider
// says which format; a shape it does not know is INVALID_ARGUMENT naming the JSON path).
func AppendProviderResponse(provider contextdv1.Provider, body []byte) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_AppendProviderResponse{
		AppendProviderResponse: &contextdv1.AppendProviderResponse{Provider: provider, Json: body},
	}}
}

// AppendMessages is a delta appending messages to a segment.
func AppendMessages(segment contextdv1.Segment, messages ...*contextdv1.Message) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_AppendMessages{
		AppendMessages: &contextdv1.AppendMessages{Segment: segment, Messages: messages},
	}}
}

// AppendProviderStream is a delta appending a streamed response from its events, each the JSON
// text of one event as the provider sent it (docs/streaming-and-frameworks.md).
func AppendProviderStream(provider contextdv1.Provider, events [][]byte) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_AppendProviderStream{
		AppendProviderStream: &contextdv1.AppendProviderStream{Provider: provider, Events: events},
	}}
}

// AppendInterruptedProviderStream is AppendProviderStream for a stream that ended early: the text
// received so far is appended as a truncated message, with the reason.
func AppendInterruptedProviderStream(provider contextdv1.Provider, events [][]byte, abortReason string) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_AppendProviderStream{
		AppendProviderStream: &contextdv1.AppendProviderStream{Provider: provider, Events: events, Interrupted: true, AbortReason: abortReason},
	}}
}

// Remember is a delta remembering a fact as an experience.
func Remember(text string) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_Remember{Remember: &contextdv1.Remember{Text: text}}}
}

// SetTitle is a delta setting the conversation's title (at most 512 UTF-8 bytes; "" = none),
// committed like any batch.
func SetTitle(title string) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_SetMetadata{SetMetadata: &contextdv1.SetMetadata{Title: &title}}}
}

// SetLabels is a delta adding or changing the labels in labels and removing those in remove; the
// others are kept. At most 32 labels, keys 1 to 64 UTF-8 bytes, values at most 256.
func SetLabels(labels map[string]string, remove ...string) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_SetMetadata{SetMetadata: &contextdv1.SetMetadata{Labels: labels, RemoveLabels: remove}}}
}

// SetIdleTTL is a delta setting how long the conversation lives without a commit, in
// milliseconds: 0 = its tenant's default, -1 = forever, else at most 100 years.
func SetIdleTTL(milliseconds int64) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_SetMetadata{SetMetadata: &contextdv1.SetMetadata{IdleTtlMs: &milliseconds}}}
}

// PruneHistory is a delta dropping the oldest history beyond maxMessages and/or maxBytes (0 = no
// such limit; whole tool rounds only), leaving one summary at its head that names what was dropped.
func PruneHistory(maxMessages uint32, maxBytes uint64) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_PruneHistory{PruneHistory: &contextdv1.PruneHistory{MaxMessages: maxMessages, MaxBytes: maxBytes}}}
}

// SetToolDefinitions is a delta replacing the tools the model may call.
func SetToolDefinitions(definitions ...*contextdv1.ToolDefinition) *contextdv1.Delta {
	return &contextdv1.Delta{Operation: &contextdv1.Delta_SetToolDefinitions{
		SetToolDefinitions: &contextdv1.SetToolDefinitions{ToolDefinitions: definitions},
	}}
}
