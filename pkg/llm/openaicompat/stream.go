package openaicompat

import (
	"cmp"
	"slices"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

// accumulator assembles a streamed response from its chunks.
//
// Tool-call fragments are keyed by the provider's index. A fragment without
// an index belongs to the last call unless it carries a new ID; a new ID at
// an index already in use starts a new call (Ollama sends every parallel call
// at index 0). Deltas number calls in order of arrival; the final response
// orders them by provider index, then arrival.
type accumulator struct {
	text    strings.Builder
	calls   []*callSlot
	byIndex map[int]*callSlot
	last    *callSlot

	finishReason string
	usage        *openai.Usage
	model        string
}

type callSlot struct {
	index int // provider index (or a synthetic one)
	seq   int // arrival order
	id    string
	name  string
	args  strings.Builder
}

func newAccumulator() *accumulator {
	return &accumulator{byIndex: make(map[int]*callSlot)}
}

// add folds one chunk in and reports its fragments to onDelta.
func (a *accumulator) add(chunk openai.ChatCompletionStreamResponse, onDelta func(llm.Delta)) {
	if chunk.Model != "" {
		a.model = chunk.Model
	}
	if chunk.Usage != nil {
		a.usage = chunk.Usage
	}
	for _, ch := range chunk.Choices {
		if ch.Index != 0 { // n=1: only the first choice
			continue
		}
		if ch.FinishReason != "" && ch.FinishReason != openai.FinishReasonNull {
			a.finishReason = string(ch.FinishReason)
		}
		text := ch.Delta.Content
		if text == "" {
			text = ch.Delta.Refusal
		}
		if text != "" {
			a.text.WriteString(text)
			if onDelta != nil {
				onDelta(llm.Delta{Text: text})
			}
		}
		for _, tc := range ch.Delta.ToolCalls {
			a.addCall(tc, onDelta)
		}
	}
}

func (a *accumulator) addCall(tc openai.ToolCall, onDelta func(llm.Delta)) {
	var slot *callSlot
	if tc.Index != nil {
		slot = a.byIndex[*tc.Index]
		if slot == nil || (tc.ID != "" && slot.id != "" && tc.ID != slot.id) {
			slot = a.newSlot(*tc.Index)
		}
	} else {
		slot = a.last
		if slot == nil || (tc.ID != "" && slot.id != "" && tc.ID != slot.id) {
			next := 0
			if a.last != nil {
				next = a.last.index + 1
			}
			slot = a.newSlot(next)
		}
	}
	a.last = slot
	if tc.ID != "" {
		slot.id = tc.ID
	}
	if tc.Function.Name != "" {
		slot.name = tc.Function.Name
	}
	slot.args.WriteString(tc.Function.Arguments)
	if onDelta != nil && (tc.ID != "" || tc.Function.Name != "" || tc.Function.Arguments != "") {
		onDelta(llm.Delta{
			ToolCallIndex: slot.seq,
			ToolCall: &message.ToolCall{
				ToolName:   tc.Function.Name,
				ToolCallID: tc.ID,
				Args:       tc.Function.Arguments,
			},
		})
	}
}

func (a *accumulator) newSlot(index int) *callSlot {
	s := &callSlot{index: index, seq: len(a.calls)}
	a.calls = append(a.calls, s)
	a.byIndex[index] = s
	return s
}

// finished reports whether the provider sent a finish reason.
func (a *accumulator) finished() bool { return a.finishReason != "" }

// response returns the assembled response.
func (a *accumulator) response(modelName string) *llm.Response {
	out := &llm.Response{
		ModelName:    modelName,
		FinishReason: a.finishReason,
		Usage:        convertUsage(a.usage),
	}
	if a.model != "" {
		out.ModelName = a.model
	}
	if a.text.Len() > 0 {
		out.Parts = append(out.Parts, message.Text{Content: a.text.String()})
	}
	calls := slices.Clone(a.calls)
	slices.SortStableFunc(calls, func(x, y *callSlot) int { return cmp.Compare(x.index, y.index) })
	for _, c := range calls {
		out.Parts = append(out.Parts, toolCallPart(c.id, c.name, c.args.String()))
	}
	return out
}
