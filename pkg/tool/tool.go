package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/offload-dev/offload/internal/jsonscan"
	"github.com/offload-dev/offload/pkg/limits"
)

// NamePattern is the pattern every tool name must match: it keeps names safe
// to use as a NATS subject token and accepted by OpenAI-compatible APIs.
const NamePattern = `^[A-Za-z0-9_-]{1,64}$`

var nameRE = regexp.MustCompile(NamePattern)

// ValidateName returns an error wrapping [ErrInvalidName] when name does not
// match [NamePattern].
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %q must match %s", ErrInvalidName, name, NamePattern)
	}
	return nil
}

// Kind says where a tool runs.
type Kind int

const (
	// KindFunction is a tool executed by this process (or by a worker on its
	// behalf).
	KindFunction Kind = iota
	// KindExternal is a tool executed elsewhere: its calls are always
	// deferred and answered with a result later.
	KindExternal
)

// String returns "function" or "external".
func (k Kind) String() string {
	if k == KindExternal {
		return "external"
	}
	return "function"
}

// HandlerFunc runs a tool with validated JSON arguments.
type HandlerFunc func(ctx context.Context, rc *RunContext, args json.RawMessage) (any, error)

// ValidatorFunc checks validated JSON arguments before the tool runs. It may
// return [ModelRetry], [ApprovalRequired] or [CallDeferred].
type ValidatorFunc func(ctx context.Context, rc *RunContext, args json.RawMessage) error

// DefaultRetries is the retry budget of a tool built by [Func] or [New].
const DefaultRetries = 1

// Def is the part of a tool definition that can travel as data: over the
// wire, in a registry, in a YAML spec.
type Def struct {
	// Name matches NamePattern.
	Name string `json:"name"`
	// Description is shown to the model.
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments (an object schema).
	// Empty means {"type":"object","properties":{}}.
	Parameters json.RawMessage `json:"parameters"`
	// Metadata is free-form; "background" is read by BackgroundTools.
	Metadata map[string]any `json:"metadata,omitempty"`
	// RequiresApproval defers every call for a person's approval.
	RequiresApproval bool `json:"requires_approval,omitempty"`
	// Idempotent declares that running a call's attempt twice has the
	// effect of running it once (SPEC §13): a worker runs it again with the
	// same idempotency key after the worker that started it stopped, where
	// a tool not so declared becomes a decision for a person.
	Idempotent bool `json:"idempotent,omitempty"`
}

// Tool is a tool offered to the model. Build one with [Func] or [New]; a
// Tool is immutable once built and safe for concurrent use.
type Tool struct {
	// Name matches NamePattern.
	Name string
	// Description is shown to the model.
	Description string
	// Parameters is the JSON Schema of the arguments.
	Parameters json.RawMessage
	// Metadata is free-form data about the tool (e.g. "background": true).
	Metadata map[string]any
	// Retries is the tool's retry budget: how many ModelRetry or validation
	// failures the model may recover from in one run. Defaults to 1 in [Func]
	// and [New]; 0 for external tools.
	Retries int
	// RequiresApproval defers every call until a person approves it.
	RequiresApproval bool
	// Idempotent declares that running an attempt twice has the effect of
	// running it once (see [Def.Idempotent]).
	Idempotent bool
	// Sequential tools never run concurrently with other tools of the same
	// step, and never in the background.
	Sequential bool
	// Timeout bounds one call of the tool: a worker advertises it in the
	// tool's registry entry (field timeout), and an agent ends a
	// background call whose worker neither answers nor keeps it by then
	// (and a grace) with DeadlineExceeded (SPEC §20). Zero: none stated.
	Timeout time.Duration
	// Dispatched marks a tool whose calls run as tasks on workers (a
	// remote tool): the agent names each call with a task ID before it
	// runs, shows it in the tool_call event and passes it in
	// RunContext.TaskID.
	Dispatched bool
	// Kind says whether the tool runs here or externally.
	Kind Kind
	// Handler runs the tool; nil for external tools.
	Handler HandlerFunc
	// Validator, if set, runs after schema validation and before Handler.
	Validator ValidatorFunc
	// Limits, when set, are the fleet control limits a worker serving the
	// tool holds its calls to, across every replica (SPEC §19); a worker
	// advertises them in its registry entry.
	Limits *limits.Limits

	schema *jsonschema.Resolved
	// fast is the schema compiled for the fast path of validation (see
	// fastschema.go); nil until compiled.
	fast *fastSchema
}

// Option configures a tool built by [Func] or [New].
type Option func(*Tool)

// Retries sets the tool's retry budget.
func Retries(n int) Option { return func(t *Tool) { t.Retries = n } }

// Meta merges kv into the tool's metadata.
func Meta(kv map[string]any) Option {
	return func(t *Tool) {
		if t.Metadata == nil {
			t.Metadata = map[string]any{}
		}
		maps.Copy(t.Metadata, kv)
	}
}

// Limited holds the tool's calls to l on the workers that serve it (see
// [Tool.Limits]).
func Limited(l *limits.Limits) Option { return func(t *Tool) { t.Limits = l } }

// NeedsApproval makes every call of the tool wait for a person's approval.
func NeedsApproval() Option { return func(t *Tool) { t.RequiresApproval = true } }

// Idempotent declares the tool idempotent: running a call's attempt again
// (with the same RunContext.IdempotencyKey) has the effect of running it
// once, so that a worker may run it again after the worker that started it
// stopped (SPEC §13).
func Idempotent() Option { return func(t *Tool) { t.Idempotent = true } }

// Timeout sets the tool's timeout (see [Tool.Timeout]).
func Timeout(d time.Duration) Option { return func(t *Tool) { t.Timeout = d } }

// Sequential makes the tool run alone: never concurrently with the other
// tools of a step, never in the background.
func Sequential() Option { return func(t *Tool) { t.Sequential = true } }

// Validate adds an args validator that receives the decoded arguments. It
// runs after schema validation and before the tool body; it may return
// [ModelRetry], [ApprovalRequired] or [CallDeferred].
func Validate[Args any](fn func(ctx context.Context, rc *RunContext, args Args) error) Option {
	return func(t *Tool) {
		t.Validator = func(ctx context.Context, rc *RunContext, raw json.RawMessage) error {
			var a Args
			if err := json.Unmarshal(raw, &a); err != nil {
				return &ValidationError{Tool: t.Name, Message: err.Error()}
			}
			return fn(ctx, rc, a)
		}
	}
}

// Func builds a tool from a typed Go function. The JSON Schema of the
// arguments is inferred from Args (a struct; field descriptions come from
// `jsonschema:"..."` tags, optional fields are those tagged omitempty). The
// function may return a [Return] to add content or metadata. Func panics if
// the name is invalid or Args cannot be described by a JSON Schema (both are
// programming errors); use [New] to get an error instead.
func Func[Args, Result any](name, description string, fn func(ctx context.Context, rc *RunContext, args Args) (Result, error), opts ...Option) *Tool {
	t, err := NewFunc(name, description, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// NewFunc is [Func] returning an error instead of panicking.
func NewFunc[Args, Result any](name, description string, fn func(ctx context.Context, rc *RunContext, args Args) (Result, error), opts ...Option) (*Tool, error) {
	s, err := jsonschema.For[Args](nil)
	if err != nil {
		return nil, invalid(name, "infer schema: %v", err)
	}
	params, err := json.Marshal(s)
	if err != nil {
		return nil, invalid(name, "marshal schema: %v", err)
	}
	handler := func(ctx context.Context, rc *RunContext, raw json.RawMessage) (any, error) {
		var a Args
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, &ValidationError{Tool: name, Message: err.Error()}
		}
		return fn(ctx, rc, a)
	}
	return New(Def{Name: name, Description: description, Parameters: params}, handler, opts...)
}

// New builds a tool from a definition and an untyped handler. A nil handler
// makes an external tool.
func New(def Def, handler HandlerFunc, opts ...Option) (*Tool, error) {
	t := &Tool{
		Name:             def.Name,
		Description:      def.Description,
		Parameters:       def.Parameters,
		Metadata:         DeepCopy(def.Metadata),
		Retries:          DefaultRetries,
		RequiresApproval: def.RequiresApproval,
		Idempotent:       def.Idempotent,
		Handler:          handler,
	}
	if handler == nil {
		t.Kind = KindExternal
		t.Retries = 0
	}
	for _, o := range opts {
		o(t)
	}
	if err := t.compile(); err != nil {
		return nil, err
	}
	return t, nil
}

// MustNew is [New] that panics on error.
func MustNew(def Def, handler HandlerFunc, opts ...Option) *Tool {
	t, err := New(def, handler, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// emptySchema is the schema of a tool without parameters.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

func (t *Tool) compile() error {
	if err := ValidateName(t.Name); err != nil {
		return err
	}
	if t.Retries < 0 {
		return invalid(t.Name, "negative retries %d", t.Retries)
	}
	if len(bytes.TrimSpace(t.Parameters)) == 0 || bytes.Equal(bytes.TrimSpace(t.Parameters), []byte("null")) {
		t.Parameters = emptySchema
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(t.Parameters, &s); err != nil {
		return invalid(t.Name, "parameters are not a JSON Schema: %v", err)
	}
	if s.Type != "" && s.Type != "object" {
		return invalid(t.Name, "parameters must be an object schema, got type %q", s.Type)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		return invalid(t.Name, "resolve schema: %v", err)
	}
	canon, err := json.Marshal(&s)
	if err != nil {
		return invalid(t.Name, "marshal schema: %v", err)
	}
	t.schema = r
	t.fast = compileFast(canon)
	return nil
}

// Def returns the tool's data definition.
func (t *Tool) Def() Def {
	return Def{
		Name:             t.Name,
		Description:      t.Description,
		Parameters:       t.Parameters,
		Metadata:         DeepCopy(t.Metadata),
		RequiresApproval: t.RequiresApproval,
		Idempotent:       t.Idempotent,
	}
}

// Clone returns a shallow copy of t with its own metadata map, for wrappers
// that change a field. The compiled schema is shared.
func (t *Tool) Clone() *Tool {
	c := *t
	c.Metadata = DeepCopy(t.Metadata)
	return &c
}

// WithParameters returns a copy of t with a different schema, compiled.
func (t *Tool) WithParameters(params json.RawMessage) (*Tool, error) {
	c := t.Clone()
	c.Parameters = params
	if err := c.compile(); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseArgs parses the model's raw arguments and checks them against the
// schema. Empty arguments mean {}. It returns the arguments as compact JSON,
// or a *ValidationError whose message the model can act on.
func (t *Tool) ParseArgs(raw string) (json.RawMessage, error) {
	trimmed := strings.TrimSpace(raw)
	if trimmed == "" {
		trimmed = "{}"
	}
	if t.ArgsCertainlyValid(json.RawMessage(trimmed)) {
		if jsonscan.IsCompact(trimmed) {
			return json.RawMessage(trimmed), nil
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(trimmed)); err == nil {
			return buf.Bytes(), nil
		}
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(trimmed))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, &ValidationError{Tool: t.Name, Message: "invalid JSON: " + err.Error()}
	}
	if dec.InputOffset() != int64(len(trimmed)) {
		return nil, &ValidationError{Tool: t.Name, Message: "invalid JSON: unexpected data after the top-level value"}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &ValidationError{Tool: t.Name, Message: "arguments must be a JSON object"}
	}
	if err := t.CheckArgs(obj); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(trimmed)); err != nil {
		return nil, &ValidationError{Tool: t.Name, Message: "invalid JSON: " + err.Error()}
	}
	return buf.Bytes(), nil
}

// ArgsCertainlyValid reports whether raw, the JSON of the arguments,
// certainly passes [Tool.CheckArgs]. It walks raw once against the schema
// compiled for typed tools' simple object schemas (types, properties,
// required, additionalProperties, items), without decoding or reflection.
// False means only "not sure": the caller validates with CheckArgs, which
// gives the verdict and the error message.
func (t *Tool) ArgsCertainlyValid(raw json.RawMessage) bool {
	return t.fast != nil && t.fast.accepts(raw)
}

// CheckArgs validates decoded arguments against the tool's schema.
func (t *Tool) CheckArgs(args map[string]any) error {
	if t.schema == nil {
		if err := t.compile(); err != nil {
			return err
		}
	}
	// jsonschema-go validates numbers as float64/int, not json.Number.
	if err := t.schema.Validate(normalizeNumbers(args)); err != nil {
		return &ValidationError{Tool: t.Name, Message: err.Error()}
	}
	return nil
}

func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalizeNumbers(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeNumbers(e)
		}
		return out
	default:
		return v
	}
}

// HasParameter reports whether the tool's schema declares the named
// top-level property.
func (t *Tool) HasParameter(name string) bool {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(t.Parameters, &s)
	_, ok := s.Properties[name]
	return ok
}

// DeepCopy returns a deep copy of a JSON-like map (nested maps and slices,
// of any element type, are copied; other values, pointers included, are
// shared).
func DeepCopy(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = deepCopyValue(v)
	}
	return out
}

func deepCopyValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return DeepCopy(x)
	case []any:
		if x == nil {
			return x
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopyValue(e)
		}
		return out
	}
	// Other slices and maps (e.g. []string, map[string]string) built in Go.
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice:
		if rv.IsNil() {
			return v
		}
		out := reflect.MakeSlice(rv.Type(), rv.Len(), rv.Len())
		for i := range rv.Len() {
			out.Index(i).Set(deepCopyReflect(rv.Index(i)))
		}
		return out.Interface()
	case reflect.Map:
		if rv.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(rv.Type(), rv.Len())
		for it := rv.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), deepCopyReflect(it.Value()))
		}
		return out.Interface()
	}
	return v
}

func deepCopyReflect(e reflect.Value) reflect.Value {
	if e.Kind() == reflect.Interface && e.IsNil() {
		return e
	}
	c := deepCopyValue(e.Interface())
	if c == nil {
		return reflect.Zero(e.Type())
	}
	return reflect.ValueOf(c)
}
