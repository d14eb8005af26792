package openaicompat

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

// accumulator assembles a response from its chunks (a non-streamed body is
// one chunk).
//
// Tool-call fragments are assembled by these rules, in order:
//
//  0. Each entry of a non-streamed message's tool_calls is a whole call of
//     its own, whatever its id.
//  1. A fragment whose id is that of a call already seen continues that
//     call (providers that repeat the id on every fragment), unless it
//     names another index, or brings argument text when the call's
//     arguments are already a whole JSON value: calls at different indices,
//     or sent whole one after the other, are different calls even when they
//     share an id (Kimi behind some gateways).
//  2. Otherwise its candidate is the call at its index or, without an
//     index, the last call (Gemini and proxies send no index).
//  3. It starts a new call instead when there is no candidate, or when the
//     candidate's arguments are already a whole JSON value and the
//     fragment brings something new: another id, another name, or more
//     argument text. So calls sent whole at one index (Ollama), or one per
//     chunk with neither index nor id (Gemini), stay apart, while an id
//     that changes after a call's first fragment (some servers mint one
//     per chunk) does not split the call: its first id is kept.
//  4. A fragment carrying both another id and another name always starts
//     a new call (calls interleaved without index); before the candidate's
//     arguments have started, nothing else does.
//
// Names are set, never concatenated; argument text is appended; a call's
// extra_content is kept (the last non-null one wins). Calls are ordered by
// provider index, then arrival; a call without an id gets a generated one.
// A call whose id another call of the response or of the history already
// has gets a unique one instead: the id with "_2" (or "_3", …) appended;
// its streamed fragments carry it too.
type accumulator struct {
	text     strings.Builder
	thinking map[string]*strings.Builder // by source
	sources  []string
	calls    []*callSlot
	byIndex  map[int]*callSlot
	byID     map[string][]*callSlot // by provider id, in arrival order
	last     *callSlot
	taken    map[string]bool // the call IDs given out, and the history's

	finishReason string
	usage        *wireUsage
	model        string
	err          *wireError // an in-band error
	errChoice    bool       // finish_reason "error"
}

type callSlot struct {
	index      int    // provider index (or the last one's)
	seq        int    // arrival order
	providerID string // the first id the provider gave the call
	id         string // the call's ID: providerID, made unique
	name       string
	args       strings.Builder
	extra      json.RawMessage
}

// newAccumulator returns an accumulator for the response to a request
// with history: the IDs of the history's tool calls are taken.
func newAccumulator(history []message.Message) *accumulator {
	a := &accumulator{
		thinking: make(map[string]*strings.Builder),
		byIndex:  make(map[int]*callSlot),
		byID:     make(map[string][]*callSlot),
		taken:    make(map[string]bool),
	}
	for _, m := range history {
		for _, c := range m.ToolCalls() {
			a.taken[c.ToolCallID] = true
		}
	}
	return a
}

// uniqueID returns id when no call has it yet, else id with the first
// free suffix "_2", "_3", …; the result is taken.
func (a *accumulator) uniqueID(id string) string {
	u := id
	for n := 2; a.taken[u]; n++ {
		u = id + "_" + strconv.Itoa(n)
	}
	a.taken[u] = true
	return u
}

// add folds one chunk in and reports its fragments to onDelta (which may be
// nil).
func (a *accumulator) add(c *wireChunk, onDelta func(llm.Delta)) {
	if c.Model != "" {
		a.model = c.Model
	}
	if c.Usage != nil {
		a.usage = c.Usage
	}
	if c.Error != nil && a.err == nil {
		a.err = c.Error
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 { // n=1: only the first choice
			continue
		}
		if ch.Error != nil && a.err == nil {
			a.err = ch.Error
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.finishReason = *ch.FinishReason
			if a.finishReason == "error" {
				a.errChoice = true
			}
		}
		a.addMessage(&ch.Message, true, onDelta)
		a.addMessage(&ch.Delta, false, onDelta)
	}
}

// addMessage folds in a message (whole: a non-streamed body's, whose tool
// calls are whole) or a delta.
func (a *accumulator) addMessage(m *wireMessage, whole bool, onDelta func(llm.Delta)) {
	if m.ReasoningContent != nil {
		a.addThinking("reasoning_content", *m.ReasoningContent, onDelta)
	}
	if m.Reasoning != nil {
		a.addThinking("reasoning", *m.Reasoning, onDelta)
	}
	if m.Content.Thinking != "" {
		a.addThinking("content", m.Content.Thinking, onDelta)
	}
	text := m.Content.Text
	if text == "" && m.Refusal != nil {
		text = *m.Refusal
	}
	if text != "" {
		a.text.WriteString(text)
		if onDelta != nil {
			onDelta(llm.Delta{Text: text})
		}
	}
	for i := range m.ToolCalls {
		a.addCall(&m.ToolCalls[i], whole, onDelta)
	}
}

func (a *accumulator) addThinking(source, text string, onDelta func(llm.Delta)) {
	if text == "" {
		return
	}
	b := a.thinking[source]
	if b == nil {
		b = &strings.Builder{}
		a.thinking[source] = b
		a.sources = append(a.sources, source)
	}
	b.WriteString(text)
	if onDelta != nil {
		onDelta(llm.Delta{Thinking: text})
	}
}

func (a *accumulator) addCall(tc *wireToolCall, whole bool, onDelta func(llm.Delta)) {
	args := string(tc.Function.Arguments)
	name := tc.Function.Name
	var slot *callSlot
	if !whole {
		slot = a.sameID(tc)
	}
	if slot == nil {
		cand := a.last
		if tc.Index != nil {
			cand = a.byIndex[*tc.Index]
		}
		if whole || a.startsNewCall(cand, tc.ID, name, args) {
			index := 0
			switch {
			case tc.Index != nil:
				index = *tc.Index
			case a.last != nil:
				index = a.last.index
			}
			slot = &callSlot{index: index, seq: len(a.calls)}
			a.calls = append(a.calls, slot)
		} else {
			slot = cand
		}
		if tc.Index != nil {
			a.byIndex[*tc.Index] = slot
		}
	}
	a.last = slot
	if tc.ID != "" && slot.providerID == "" {
		slot.providerID, slot.id = tc.ID, a.uniqueID(tc.ID)
		a.byID[tc.ID] = append(a.byID[tc.ID], slot)
	}
	if name != "" {
		slot.name = name
	}
	slot.args.WriteString(args)
	if raw := bytes.TrimSpace(tc.ExtraContent); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		slot.extra = append(json.RawMessage(nil), raw...)
	}
	if onDelta != nil && (tc.ID != "" || name != "" || args != "") {
		id := ""
		if tc.ID != "" {
			id = slot.id
		}
		onDelta(llm.Delta{
			ToolCallIndex: slot.seq,
			ToolCall:      &message.ToolCall{ToolName: name, ToolCallID: id, Args: args},
		})
	}
}

// sameID applies rule 1 of [accumulator]: the call a fragment continues by
// its id, at the fragment's index when it has one, else the latest; none
// when that call is whole and the fragment brings more arguments.
func (a *accumulator) sameID(tc *wireToolCall) *callSlot {
	slots := a.byID[tc.ID]
	if tc.ID == "" || len(slots) == 0 {
		return nil
	}
	var slot *callSlot
	if tc.Index == nil {
		slot = slots[len(slots)-1]
	}
	for _, s := range slots {
		if tc.Index != nil && s.index == *tc.Index {
			slot = s
		}
	}
	if slot != nil && complete(slot.args.String()) && strings.TrimSpace(string(tc.Function.Arguments)) != "" {
		return nil
	}
	return slot
}

// startsNewCall applies rules 2–4 of [accumulator].
func (a *accumulator) startsNewCall(cand *callSlot, id, name, args string) bool {
	if cand == nil {
		return true
	}
	otherID := id != "" && cand.id != "" && id != cand.id
	otherName := name != "" && cand.name != "" && name != cand.name
	if otherID && otherName {
		return true // interleaved calls told apart by id alone
	}
	if complete(cand.args.String()) {
		return otherID || otherName || strings.TrimSpace(args) != ""
	}
	if strings.TrimSpace(cand.args.String()) == "" {
		return otherID && name != "" && cand.name != ""
	}
	return false
}

// complete reports whether the provider said the response is finished.
func (a *accumulator) finished() bool { return a.finishReason != "" }

// failure returns the in-band error the response carried, if any.
func (a *accumulator) failure(key Secret) *APIError {
	switch {
	case a.err != nil:
		return inBandError(a.err, key)
	case a.errChoice:
		return &APIError{StatusCode: 200, InBand: true, Message: `finish_reason "error" without an error object`}
	}
	return nil
}

// response returns the assembled response.
func (a *accumulator) response(modelName string) *llm.Response {
	out := &llm.Response{ModelName: modelName, FinishReason: a.finishReason}
	if a.model != "" {
		out.ModelName = a.model
	}
	if a.usage != nil {
		out.Usage = message.Usage{InputTokens: a.usage.PromptTokens, OutputTokens: a.usage.CompletionTokens}
	}
	for _, src := range a.sources {
		out.Parts = append(out.Parts, message.Thinking{Content: a.thinking[src].String(), Source: src})
	}
	if a.text.Len() > 0 {
		out.Parts = append(out.Parts, message.Text{Content: a.text.String()})
	}
	calls := slices.Clone(a.calls)
	slices.SortStableFunc(calls, func(x, y *callSlot) int { return cmp.Compare(x.index, y.index) })
	for _, c := range calls {
		tc := toolCallPart(c.id, c.name, c.args.String())
		tc.ProviderExtra = string(c.extra)
		out.Parts = append(out.Parts, tc)
	}
	return out
}
