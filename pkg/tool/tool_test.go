package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

type address struct {
	City string `json:"city" jsonschema:"the city name"`
	Zip  string `json:"zip,omitempty"`
}

type searchArgs struct {
	Query    string    `json:"query" jsonschema:"what to search for"`
	Limit    int       `json:"limit,omitempty" jsonschema:"maximum number of results"`
	MinScore float64   `json:"min_score,omitempty"`
	Tags     []string  `json:"tags,omitempty"`
	Near     address   `json:"near"`
	Also     []address `json:"also,omitempty"`
	Exact    bool      `json:"exact"`
}

func searchTool(opts ...tool.Option) *tool.Tool {
	return tool.Func("search", "Search the catalogue.", func(_ context.Context, _ *tool.RunContext, a searchArgs) (string, error) {
		return fmt.Sprintf("%s near %s (limit %d)", a.Query, a.Near.City, a.Limit), nil
	}, opts...)
}

func TestFuncSchema(t *testing.T) {
	t.Parallel()
	tl := searchTool()
	const want = `{"type":"object","properties":{` +
		`"query":{"type":"string","description":"what to search for"},` +
		`"limit":{"type":"integer","description":"maximum number of results"},` +
		`"min_score":{"type":"number"},` +
		`"tags":{"type":["null","array"],"items":{"type":"string"}},` +
		`"near":{"type":"object","properties":{"city":{"type":"string","description":"the city name"},"zip":{"type":"string"}},"required":["city"],"additionalProperties":false},` +
		`"also":{"type":["null","array"],"items":{"type":"object","properties":{"city":{"type":"string","description":"the city name"},"zip":{"type":"string"}},"required":["city"],"additionalProperties":false}},` +
		`"exact":{"type":"boolean"}},` +
		`"required":["query","near","exact"],"additionalProperties":false}`
	if got := string(tl.Parameters); got != want {
		t.Errorf("schema:\n got: %s\nwant: %s", got, want)
	}
	if tl.Name != "search" || tl.Description != "Search the catalogue." || tl.Kind != tool.KindFunction ||
		tl.Retries != tool.DefaultRetries || tl.Handler == nil || tl.RequiresApproval || tl.Sequential || tl.Metadata != nil {
		t.Errorf("defaults: %+v", tl)
	}

	// A struct without fields has an empty object schema; so has a tool
	// built from a definition without parameters.
	type none struct{}
	empty := tool.Func("noop", "", func(context.Context, *tool.RunContext, none) (any, error) { return nil, nil })
	if got := string(empty.Parameters); got != `{"type":"object","additionalProperties":false}` {
		t.Errorf("empty struct schema: %s", got)
	}
	for _, params := range []string{"", "  ", "null"} {
		tl := tool.MustNew(tool.Def{Name: "x", Parameters: json.RawMessage(params)}, nil)
		if got := string(tl.Parameters); got != `{"type":"object","properties":{}}` {
			t.Errorf("parameters %q: schema %s", params, got)
		}
		if _, err := tl.ParseArgs(`{"anything":1}`); err != nil {
			t.Errorf("parameters %q: %v", params, err)
		}
	}
}

func TestFuncInvalidArgsType(t *testing.T) {
	t.Parallel()
	_, err := tool.NewFunc("bad", "", func(context.Context, *tool.RunContext, chan int) (any, error) { return nil, nil })
	if !errors.Is(err, tool.ErrInvalidTool) || !strings.Contains(err.Error(), `tool "bad": infer schema`) {
		t.Errorf("channel args: %v", err)
	}
	_, err = tool.NewFunc("bad", "", func(context.Context, *tool.RunContext, string) (any, error) { return nil, nil })
	if !errors.Is(err, tool.ErrInvalidTool) || !strings.Contains(err.Error(), "object schema") {
		t.Errorf("string args: %v", err)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("Func with invalid args type did not panic")
		}
	}()
	tool.Func("bad", "", func(context.Context, *tool.RunContext, chan int) (any, error) { return nil, nil })
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	tl := searchTool()
	tests := []struct {
		name, args string
		want       string   // compact JSON when valid
		errHas     []string // substrings of the *ValidationError message
	}{
		{name: "valid", args: ` { "query": "tea", "near": {"city": "Oslo"}, "exact": false } `,
			want: `{"query":"tea","near":{"city":"Oslo"},"exact":false}`},
		{name: "valid with optionals", args: `{"query":"tea","near":{"city":"Oslo","zip":"0150"},"exact":true,"limit":3,"min_score":0.5,"tags":["a"],"also":[{"city":"Bergen"}]}`,
			want: `{"query":"tea","near":{"city":"Oslo","zip":"0150"},"exact":true,"limit":3,"min_score":0.5,"tags":["a"],"also":[{"city":"Bergen"}]}`},
		{name: "null optional slice", args: `{"query":"tea","near":{"city":"Oslo"},"exact":true,"tags":null}`,
			want: `{"query":"tea","near":{"city":"Oslo"},"exact":true,"tags":null}`},
		{name: "invalid JSON", args: `{"query": "tea"`, errHas: []string{"invalid JSON"}},
		{name: "trailing garbage", args: `{"query":"tea"} x`, errHas: []string{"invalid JSON"}},
		{name: "two objects", args: `{} {}`, errHas: []string{"invalid JSON"}},
		{name: "trailing bracket", args: `{}]`, errHas: []string{"invalid JSON"}},
		{name: "array", args: `[1,2]`, errHas: []string{"arguments must be a JSON object"}},
		{name: "string", args: `"tea"`, errHas: []string{"arguments must be a JSON object"}},
		{name: "null", args: `null`, errHas: []string{"arguments must be a JSON object"}},
		{name: "wrong type", args: `{"query":1,"near":{"city":"Oslo"},"exact":true}`,
			errHas: []string{"/properties/query", `has type "integer", want "string"`}},
		{name: "wrong nested type", args: `{"query":"tea","near":{"city":7},"exact":true}`,
			errHas: []string{"/properties/near", "/properties/city", `want "string"`}},
		{name: "wrong item type", args: `{"query":"tea","near":{"city":"Oslo"},"exact":true,"tags":[1]}`,
			errHas: []string{"/properties/tags", `want "string"`}},
		{name: "missing required", args: `{"query":"tea"}`,
			errHas: []string{"required", "missing properties", `"near"`, `"exact"`}},
		{name: "missing nested required", args: `{"query":"tea","near":{},"exact":true}`,
			errHas: []string{"/properties/near", "missing properties", `"city"`}},
		{name: "additional property", args: `{"query":"tea","near":{"city":"Oslo"},"exact":true,"colour":"red"}`,
			errHas: []string{"unexpected additional properties", `"colour"`}},
		{name: "float for integer", args: `{"query":"tea","near":{"city":"Oslo"},"exact":true,"limit":2.5}`,
			errHas: []string{"/properties/limit", `want "integer"`}},
		{name: "empty means {}", args: "", errHas: []string{"missing properties", `"query"`}},
		{name: "blank means {}", args: " \n\t", errHas: []string{"missing properties", `"query"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tl.ParseArgs(tt.args)
			if tt.errHas == nil {
				if err != nil {
					t.Fatalf("ParseArgs: %v", err)
				}
				if string(got) != tt.want {
					t.Errorf("ParseArgs = %s, want %s", got, tt.want)
				}
				return
			}
			var ve *tool.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("ParseArgs = %s, %v; want a *ValidationError", got, err)
			}
			if ve.Tool != "search" || ve.Error() != ve.Message {
				t.Errorf("ValidationError = %+v", ve)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(ve.Message, s) {
					t.Errorf("message %q does not contain %q", ve.Message, s)
				}
			}
		})
	}
}

func TestParseArgsEmpty(t *testing.T) {
	t.Parallel()
	type opt struct {
		N int `json:"n,omitempty"`
	}
	tl := tool.Func("opt", "", func(_ context.Context, _ *tool.RunContext, a opt) (int, error) { return a.N, nil })
	for _, args := range []string{"", "  ", "{}"} {
		got, err := tl.ParseArgs(args)
		if err != nil || string(got) != "{}" {
			t.Errorf("ParseArgs(%q) = %s, %v; want {}", args, got, err)
		}
	}
}

func TestParseArgsNumbers(t *testing.T) {
	t.Parallel()
	type nums struct {
		I int     `json:"i"`
		F float64 `json:"f"`
		U uint8   `json:"u,omitempty"`
	}
	tl := tool.Func("nums", "", func(_ context.Context, _ *tool.RunContext, a nums) (nums, error) { return a, nil })
	valid := []string{
		`{"i":1,"f":1}`,
		`{"i":-3,"f":2.5}`,
		`{"i":0,"f":1e3}`,
		`{"i":9007199254740993,"f":0.1}`, // beyond float64 precision, still an integer
		`{"i":1.0,"f":1}`,                // JSON Schema: 1.0 is an integer
		`{"i":1e2,"f":-0}`,
	}
	for _, args := range valid {
		if _, err := tl.ParseArgs(args); err != nil {
			t.Errorf("ParseArgs(%s): %v", args, err)
		}
	}
	invalid := []string{
		`{"i":1.5,"f":1}`,
		`{"i":"1","f":1}`,
		`{"i":1,"f":"1.5"}`,
		`{"i":1,"f":null}`,
	}
	for _, args := range invalid {
		var ve *tool.ValidationError
		if _, err := tl.ParseArgs(args); !errors.As(err, &ve) {
			t.Errorf("ParseArgs(%s) = %v, want a *ValidationError", args, err)
		}
	}

	// Numbers reach the typed function unchanged (no float64 round trip).
	raw, err := tl.ParseArgs(`{"i":9007199254740993,"f":0.1}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tl.Run(context.Background(), &tool.RunContext{}, raw)
	if err != nil || got.(nums).I != 9007199254740993 || got.(nums).F != 0.1 {
		t.Errorf("Run = %+v, %v", got, err)
	}

	// 1.0 passes the schema but not Go's decoding into an int: the typed
	// handler reports it as a *ValidationError the model can act on.
	raw, err = tl.ParseArgs(`{"i":1.0,"f":1}`)
	if err != nil {
		t.Fatal(err)
	}
	var ve *tool.ValidationError
	if _, err := tl.Run(context.Background(), &tool.RunContext{}, raw); !errors.As(err, &ve) || ve.Tool != "nums" {
		t.Errorf("Run with 1.0 for an int = %v, want a *ValidationError", err)
	}
}

func TestCheckArgs(t *testing.T) {
	t.Parallel()
	tl := searchTool()
	if err := tl.CheckArgs(map[string]any{"query": "x", "near": map[string]any{"city": "y"}, "exact": true, "limit": 2}); err != nil {
		t.Errorf("CheckArgs: %v", err)
	}
	var ve *tool.ValidationError
	if err := tl.CheckArgs(map[string]any{"query": "x"}); !errors.As(err, &ve) {
		t.Errorf("CheckArgs missing required: %v", err)
	}
	// A tool built as a literal compiles its schema on first use.
	lit := &tool.Tool{Name: "lit", Parameters: json.RawMessage(`{"type":"object","required":["a"]}`)}
	if err := lit.CheckArgs(map[string]any{}); !errors.As(err, &ve) {
		t.Errorf("literal tool: %v", err)
	}
	if _, err := lit.ParseArgs(`{"a":1}`); err != nil {
		t.Errorf("literal tool: %v", err)
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	valid := []string{"a", "get_weather", "Search-2", strings.Repeat("x", 64), "0", "_", "-"}
	invalid := []string{"", strings.Repeat("x", 65), "a.b", "a b", "a*", "a>", "héllo", "a/b", "tools.task"}
	fn := func(context.Context, *tool.RunContext, struct{}) (any, error) { return nil, nil }
	for _, name := range valid {
		if err := tool.ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q): %v", name, err)
		}
		if _, err := tool.NewFunc(name, "", fn); err != nil {
			t.Errorf("NewFunc(%q): %v", name, err)
		}
	}
	for _, name := range invalid {
		if err := tool.ValidateName(name); !errors.Is(err, tool.ErrInvalidName) || !strings.Contains(err.Error(), tool.NamePattern) {
			t.Errorf("ValidateName(%q) = %v", name, err)
		}
		if _, err := tool.NewFunc(name, "", fn); !errors.Is(err, tool.ErrInvalidName) {
			t.Errorf("NewFunc(%q) = %v, want ErrInvalidName", name, err)
		}
		if _, err := tool.New(tool.Def{Name: name}, nil); !errors.Is(err, tool.ErrInvalidName) {
			t.Errorf("New(%q) = %v, want ErrInvalidName", name, err)
		}
		if _, err := tool.External(tool.Def{Name: name}); !errors.Is(err, tool.ErrInvalidName) {
			t.Errorf("External(%q) = %v, want ErrInvalidName", name, err)
		}
		if _, err := tool.NewSet(&tool.Tool{Name: name}); !errors.Is(err, tool.ErrInvalidName) {
			t.Errorf("NewSet(%q) = %v, want ErrInvalidName", name, err)
		}
	}
	func() {
		defer func() {
			r := recover()
			if err, ok := r.(error); !ok || !errors.Is(err, tool.ErrInvalidName) {
				t.Errorf("Func with an invalid name panicked with %v", r)
			}
		}()
		tool.Func("no spaces allowed", "", fn)
	}()
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("MustNew with an invalid name did not panic")
			}
		}()
		tool.MustNew(tool.Def{Name: "a.b"}, nil)
	}()
}

func TestNewSet(t *testing.T) {
	t.Parallel()
	a, b := tool.MustNew(tool.Def{Name: "a"}, nil), tool.MustNew(tool.Def{Name: "b"}, nil)
	s, err := tool.NewSet(a, b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Tools(context.Background())
	if err != nil || len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("Tools = %v, %v", got, err)
	}
	if _, err := tool.NewSet(); err != nil {
		t.Errorf("empty set: %v", err)
	}

	_, err = tool.NewSet(a, b, tool.MustNew(tool.Def{Name: "a", Description: "another"}, nil))
	if !errors.Is(err, tool.ErrInvalidTool) || !strings.Contains(err.Error(), `duplicate tool name "a"`) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := tool.NewSet(a, nil); !errors.Is(err, tool.ErrInvalidTool) {
		t.Errorf("nil tool: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("MustSet with duplicates did not panic")
			}
		}()
		tool.MustSet(a, a)
	}()

	var fs tool.Toolset = tool.FuncSet(func(context.Context) ([]*tool.Tool, error) { return nil, errors.New("registry down") })
	if _, err := fs.Tools(context.Background()); err == nil || err.Error() != "registry down" {
		t.Errorf("FuncSet: %v", err)
	}
}

func TestExternal(t *testing.T) {
	t.Parallel()
	set, err := tool.External(
		tool.Def{Name: "buy", Description: "Buy an item.", Parameters: json.RawMessage(`{"type":"object","properties":{"item":{"type":"string"}},"required":["item"],"additionalProperties":false}`)},
		tool.Def{Name: "ping", Metadata: map[string]any{"queue": "ops"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	tools, _ := set.Tools(context.Background())
	if len(tools) != 2 {
		t.Fatalf("got %d tools", len(tools))
	}
	buy := tools[0]
	if buy.Kind != tool.KindExternal || buy.Kind.String() != "external" || buy.Retries != 0 || buy.Handler != nil || buy.Validator != nil {
		t.Errorf("external tool: %+v", buy)
	}
	if _, err := buy.Run(context.Background(), &tool.RunContext{}, json.RawMessage(`{"item":"apple"}`)); !errors.Is(err, tool.ErrExternal) {
		t.Errorf("Run = %v, want ErrExternal", err)
	}
	if tool.ErrExternal.Error() != "External tools cannot be called" {
		t.Errorf("ErrExternal = %q", tool.ErrExternal)
	}
	// Its schema is enforced.
	if _, err := buy.ParseArgs(`{"item":"apple"}`); err != nil {
		t.Errorf("valid args: %v", err)
	}
	var ve *tool.ValidationError
	for _, args := range []string{`{}`, `{"item":1}`, `{"item":"apple","qty":2}`, `nope`} {
		if _, err := buy.ParseArgs(args); !errors.As(err, &ve) || ve.Tool != "buy" {
			t.Errorf("ParseArgs(%s) = %v, want a *ValidationError", args, err)
		}
	}
	if tools[1].Metadata["queue"] != "ops" || string(tools[1].Parameters) != `{"type":"object","properties":{}}` {
		t.Errorf("ping: %+v", tools[1])
	}

	if _, err := tool.External(tool.Def{Name: "x"}, tool.Def{Name: "x"}); !errors.Is(err, tool.ErrInvalidTool) {
		t.Errorf("duplicate external: %v", err)
	}
	if _, err := tool.External(tool.Def{Name: "x", Parameters: json.RawMessage(`{"type":"string"}`)}); !errors.Is(err, tool.ErrInvalidTool) {
		t.Errorf("non-object schema: %v", err)
	}
	if _, err := tool.External(tool.Def{Name: "x", Parameters: json.RawMessage(`[`)}); !errors.Is(err, tool.ErrInvalidTool) {
		t.Errorf("broken schema: %v", err)
	}
	// An external tool can be given a retry budget explicitly.
	if tl := tool.MustNew(tool.Def{Name: "x"}, nil, tool.Retries(2)); tl.Retries != 2 || tl.Kind != tool.KindExternal {
		t.Errorf("external with Retries(2): %+v", tl)
	}
}

func TestWithMetadata(t *testing.T) {
	t.Parallel()
	orig := tool.MustNew(tool.Def{Name: "a", Metadata: map[string]any{"team": "ops", "background": false}}, okHandler)
	plain := tool.MustNew(tool.Def{Name: "b"}, okHandler)
	kv := map[string]any{"background": true, "limits": map[string]any{"max": 3.0}, "tags": []any{"x"}}
	ts := tool.WithMetadata(tool.MustSet(orig, plain), kv)
	tools, err := ts.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantA := map[string]any{"team": "ops", "background": true, "limits": map[string]any{"max": 3.0}, "tags": []any{"x"}}
	if !reflect.DeepEqual(tools[0].Metadata, wantA) {
		t.Errorf("merged metadata = %v", tools[0].Metadata)
	}
	if !reflect.DeepEqual(tools[1].Metadata, map[string]any{"background": true, "limits": map[string]any{"max": 3.0}, "tags": []any{"x"}}) {
		t.Errorf("metadata of a tool without any = %v", tools[1].Metadata)
	}
	// The originals are untouched.
	if !reflect.DeepEqual(orig.Metadata, map[string]any{"team": "ops", "background": false}) || plain.Metadata != nil {
		t.Errorf("original changed: %v, %v", orig.Metadata, plain.Metadata)
	}
	// The values are deep-copied: per tool, and from kv.
	tools[0].Metadata["limits"].(map[string]any)["max"] = 99.0
	tools[0].Metadata["tags"].([]any)[0] = "changed"
	if tools[1].Metadata["limits"].(map[string]any)["max"] != 3.0 || tools[1].Metadata["tags"].([]any)[0] != "x" {
		t.Error("tools share metadata values")
	}
	if kv["limits"].(map[string]any)["max"] != 3.0 || kv["tags"].([]any)[0] != "x" {
		t.Error("kv changed through a tool's metadata")
	}
	// Each call of Tools produces fresh copies.
	again, _ := ts.Tools(context.Background())
	if again[0].Metadata["limits"].(map[string]any)["max"] != 3.0 {
		t.Error("a later Tools call sees an earlier caller's change")
	}
	// Behaviour is kept.
	if got, err := tools[0].Run(context.Background(), &tool.RunContext{}, nil); err != nil || got != "ok" {
		t.Errorf("Run = %v, %v", got, err)
	}

	failing := tool.WithMetadata(tool.FuncSet(func(context.Context) ([]*tool.Tool, error) { return nil, errors.New("boom") }), kv)
	if _, err := failing.Tools(context.Background()); err == nil {
		t.Error("error of the inner toolset lost")
	}
}

func okHandler(context.Context, *tool.RunContext, json.RawMessage) (any, error) { return "ok", nil }

func TestRequireApproval(t *testing.T) {
	t.Parallel()
	ran := map[string]int{}
	mk := func(name string) *tool.Tool {
		return tool.MustNew(tool.Def{Name: name}, func(_ context.Context, rc *tool.RunContext, _ json.RawMessage) (any, error) {
			ran[rc.ToolName]++
			return "ran " + rc.ToolName, nil
		})
	}
	ext := tool.MustNew(tool.Def{Name: "ext"}, nil)
	var seen []string
	pred := func(_ context.Context, rc *tool.RunContext, tl *tool.Tool, args json.RawMessage) bool {
		seen = append(seen, tl.Name+":"+string(args))
		return strings.HasPrefix(tl.Name, "danger")
	}
	base := tool.MustSet(mk("danger_rm"), mk("safe_ls"), ext)
	tools, err := tool.RequireApproval(base, pred).Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := func(tl *tool.Tool, approved bool) (any, error) {
		return tl.Run(ctx, &tool.RunContext{ToolName: tl.Name, ToolCallApproved: approved}, json.RawMessage(`{"p":1}`))
	}

	// Predicate false: runs.
	if got, err := call(tools[1], false); err != nil || got != "ran safe_ls" {
		t.Errorf("safe call = %v, %v", got, err)
	}
	// Predicate true, not approved: deferred for approval, body not run.
	var ar *tool.ApprovalRequired
	if got, err := call(tools[0], false); !errors.As(err, &ar) || got != nil || ar.Metadata != nil || ran["danger_rm"] != 0 {
		t.Errorf("unapproved dangerous call = %v, %v (ran %d)", got, err, ran["danger_rm"])
	}
	// Approved: runs, the predicate is not asked.
	n := len(seen)
	if got, err := call(tools[0], true); err != nil || got != "ran danger_rm" {
		t.Errorf("approved call = %v, %v", got, err)
	}
	if len(seen) != n {
		t.Errorf("predicate asked for an approved call")
	}
	if want := []string{`safe_ls:{"p":1}`, `danger_rm:{"p":1}`}; !reflect.DeepEqual(seen, want) {
		t.Errorf("predicate saw %v, want %v", seen, want)
	}
	// External tools are left alone; the originals are not wrapped.
	if tools[2] != ext {
		t.Error("external tool wrapped")
	}
	if _, err := base.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	orig, _ := base.Tools(ctx)
	if got, err := call(orig[0], false); err != nil || got != "ran danger_rm" {
		t.Errorf("original tool changed: %v, %v", got, err)
	}

	// A nil predicate requires approval for every call.
	all, _ := tool.RequireApproval(base, nil).Tools(ctx)
	for _, tl := range all[:2] {
		if _, err := call(tl, false); !errors.As(err, &ar) {
			t.Errorf("%s with nil predicate = %v", tl.Name, err)
		}
		if _, err := call(tl, true); err != nil {
			t.Errorf("%s approved with nil predicate = %v", tl.Name, err)
		}
	}
	// Outside a run (nil RunContext) a call is not approved.
	if _, err := all[0].Run(ctx, nil, nil); !errors.As(err, &ar) {
		t.Errorf("nil RunContext = %v", err)
	}

	failing := tool.RequireApproval(tool.FuncSet(func(context.Context) ([]*tool.Tool, error) { return nil, errors.New("boom") }), nil)
	if _, err := failing.Tools(ctx); err == nil {
		t.Error("error of the inner toolset lost")
	}
}

type customErr struct{ code int }

func (e *customErr) Error() string { return fmt.Sprint("code ", e.code) }

type valueErr struct{}

func (valueErr) Error() string { return "value" }

type codeErr int

func (codeErr) Error() string { return "code" }

func TestErrorType(t *testing.T) {
	t.Parallel()
	_, pathErr := os.Open("/definitely/not/here")
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{&customErr{1}, "customErr"},
		{valueErr{}, "valueErr"},
		{codeErr(3), "codeErr"},
		{pathErr, "PathError"},
		{&fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}, "PathError"},
		{fmt.Errorf("read config: %w", pathErr), "PathError"},
		{fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", &customErr{2})), "customErr"},
		{fmt.Errorf("two: %w and %w", valueErr{}, pathErr), "valueErr"},
		{fmt.Errorf("no wrapping: %v", pathErr), "errorString"}, //nolint:errorlint // the case of an error that wraps nothing
		{errors.New("plain"), "errorString"},
		{errors.Join(errors.New("a"), pathErr), "joinError"},
		{fmt.Errorf("wrapped join: %w", errors.Join(pathErr)), "joinError"},
		{context.Canceled, "errorString"},
		{context.DeadlineExceeded, "deadlineExceededError"},
		{fmt.Errorf("nil: %w", nil), "wrapError"},
		{tool.Retry("x"), "ModelRetry"},
		{&json.SyntaxError{}, "SyntaxError"},
	}
	for _, tt := range tests {
		if got := tool.ErrorType(tt.err); got != tt.want {
			t.Errorf("ErrorType(%#v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestOutcomeErrors(t *testing.T) {
	t.Parallel()
	var retry *tool.ModelRetry
	if err := fmt.Errorf("wrapped: %w", tool.Retry("use a positive number")); !errors.As(err, &retry) || retry.Message != "use a positive number" {
		t.Errorf("Retry: %v", err)
	}
	var failed *tool.ToolFailed
	if err := tool.Fail("disk full"); !errors.As(err, &failed) || err.Error() != "disk full" {
		t.Errorf("Fail: %v", err)
	}
	if (&tool.ApprovalRequired{}).Error() != "tool call requires approval" {
		t.Error("ApprovalRequired text")
	}
	if (&tool.CallDeferred{}).Error() != "tool call deferred for external execution" {
		t.Error("CallDeferred text")
	}
}

type transferArgs struct {
	To     string `json:"to"`
	Amount int    `json:"amount"`
}

func TestValidateOption(t *testing.T) {
	t.Parallel()
	var calls []transferArgs
	tl := tool.Func("transfer", "", func(_ context.Context, _ *tool.RunContext, a transferArgs) (string, error) {
		return "sent", nil
	}, tool.Validate(func(_ context.Context, rc *tool.RunContext, a transferArgs) error {
		calls = append(calls, a)
		switch {
		case a.Amount <= 0:
			return tool.Retry("amount must be positive")
		case a.Amount > 1000 && !rc.ToolCallApproved:
			return &tool.ApprovalRequired{Metadata: map[string]any{"amount": a.Amount}}
		case a.To == "offshore":
			return &tool.CallDeferred{}
		}
		return nil
	}))
	if tl.Validator == nil {
		t.Fatal("no validator")
	}
	ctx := context.Background()
	check := func(args string, approved bool) error {
		return tl.Validator(ctx, &tool.RunContext{ToolCallApproved: approved}, json.RawMessage(args))
	}
	var retry *tool.ModelRetry
	var ar *tool.ApprovalRequired
	var cd *tool.CallDeferred
	var ve *tool.ValidationError
	if err := check(`{"to":"bob","amount":0}`, false); !errors.As(err, &retry) || retry.Message != "amount must be positive" {
		t.Errorf("amount 0: %v", err)
	}
	if err := check(`{"to":"bob","amount":5000}`, false); !errors.As(err, &ar) || ar.Metadata["amount"] != 5000 {
		t.Errorf("amount 5000: %v", err)
	}
	if err := check(`{"to":"bob","amount":5000}`, true); err != nil {
		t.Errorf("approved amount 5000: %v", err)
	}
	if err := check(`{"to":"offshore","amount":5}`, false); !errors.As(err, &cd) {
		t.Errorf("offshore: %v", err)
	}
	if err := check(`{"to":"bob","amount":"many"}`, false); !errors.As(err, &ve) || ve.Tool != "transfer" {
		t.Errorf("undecodable args: %v", err)
	}
	if want := []transferArgs{{"bob", 0}, {"bob", 5000}, {"bob", 5000}, {"offshore", 5}}; !reflect.DeepEqual(calls, want) {
		t.Errorf("validator saw %v, want %v", calls, want)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	meta := map[string]any{"background": true, "nested": map[string]any{"a": 1.0}}
	tl := searchTool(tool.Retries(3), tool.Meta(meta), tool.Meta(map[string]any{"team": "ops"}), tool.NeedsApproval(), tool.Sequential())
	if tl.Retries != 3 || !tl.RequiresApproval || !tl.Sequential {
		t.Errorf("options: %+v", tl)
	}
	want := map[string]any{"background": true, "nested": map[string]any{"a": 1.0}, "team": "ops"}
	if !reflect.DeepEqual(tl.Metadata, want) {
		t.Errorf("metadata = %v, want %v", tl.Metadata, want)
	}
	if len(meta) != 2 {
		t.Errorf("Meta changed its argument: %v", meta)
	}
	if tl := searchTool(tool.Retries(0)); tl.Retries != 0 {
		t.Errorf("Retries(0) = %d", tl.Retries)
	}
	if _, err := tool.NewFunc("x", "", func(context.Context, *tool.RunContext, searchArgs) (any, error) { return nil, nil }, tool.Retries(-1)); !errors.Is(err, tool.ErrInvalidTool) {
		t.Errorf("Retries(-1): %v", err)
	}

	def := tl.Def()
	if def.Name != "search" || def.Description != "Search the catalogue." || !def.RequiresApproval ||
		string(def.Parameters) != string(tl.Parameters) || !reflect.DeepEqual(def.Metadata, want) {
		t.Errorf("Def() = %+v", def)
	}
	def.Metadata["nested"].(map[string]any)["a"] = 2.0
	if tl.Metadata["nested"].(map[string]any)["a"] != 1.0 {
		t.Error("Def() shares metadata with the tool")
	}
	b, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	var back tool.Def
	if err := json.Unmarshal(b, &back); err != nil || back.Name != "search" || !back.RequiresApproval {
		t.Errorf("Def JSON round trip: %+v, %v", back, err)
	}
	if b, _ := json.Marshal(tool.Def{Name: "x"}); string(b) != `{"name":"x","description":"","parameters":null}` {
		t.Errorf("minimal Def JSON: %s", b)
	}

	// RequiresApproval in a Def carries over to the tool.
	if tl := tool.MustNew(tool.Def{Name: "x", RequiresApproval: true}, okHandler); !tl.RequiresApproval || tl.Kind != tool.KindFunction || tl.Kind.String() != "function" {
		t.Errorf("New from Def: %+v", tl)
	}
}

func TestCloneAndWithParameters(t *testing.T) {
	t.Parallel()
	tl := searchTool(tool.Meta(map[string]any{"nested": map[string]any{"a": 1.0}}))
	c := tl.Clone()
	c.Metadata["nested"].(map[string]any)["a"] = 2.0
	c.Description = "changed"
	if tl.Metadata["nested"].(map[string]any)["a"] != 1.0 || tl.Description != "Search the catalogue." {
		t.Error("Clone shares state with the original")
	}

	w, err := tl.WithParameters(json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ParseArgs(`{"q":"x"}`); err != nil {
		t.Errorf("new schema: %v", err)
	}
	if _, err := tl.ParseArgs(`{"q":"x"}`); err == nil {
		t.Error("WithParameters changed the original's schema")
	}
	if _, err := tl.WithParameters(json.RawMessage(`{"type":"array"}`)); !errors.Is(err, tool.ErrInvalidTool) {
		t.Errorf("array schema: %v", err)
	}
	if _, err := tl.WithParameters(json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"#/nope"}}}`)); !errors.Is(err, tool.ErrInvalidTool) {
		t.Errorf("unresolvable schema: %v", err)
	}
}

func TestDeepCopy(t *testing.T) {
	t.Parallel()
	if tool.DeepCopy(nil) != nil {
		t.Error("DeepCopy(nil) != nil")
	}
	ptr := &customErr{1}
	orig := map[string]any{
		"s":       "x",
		"n":       1.5,
		"map":     map[string]any{"inner": map[string]any{"v": 1.0}},
		"list":    []any{map[string]any{"v": 1.0}, []any{"a"}},
		"strings": []string{"a", "b"},
		"smap":    map[string]string{"k": "v"},
		"maps":    []map[string]any{{"v": 1.0}},
		"nilmap":  map[string]any(nil),
		"nillist": []any(nil),
		"ptr":     ptr,
		"null":    nil,
	}
	c := tool.DeepCopy(orig)
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("copy differs:\n got: %v\nwant: %v", c, orig)
	}
	c["s"] = "changed"
	c["map"].(map[string]any)["inner"].(map[string]any)["v"] = 2.0
	c["list"].([]any)[0].(map[string]any)["v"] = 2.0
	c["list"].([]any)[1].([]any)[0] = "changed"
	c["strings"].([]string)[0] = "changed"
	c["smap"].(map[string]string)["k"] = "changed"
	c["maps"].([]map[string]any)[0]["v"] = 2.0
	if orig["s"] != "x" ||
		orig["map"].(map[string]any)["inner"].(map[string]any)["v"] != 1.0 ||
		orig["list"].([]any)[0].(map[string]any)["v"] != 1.0 ||
		orig["list"].([]any)[1].([]any)[0] != "a" ||
		orig["strings"].([]string)[0] != "a" ||
		orig["smap"].(map[string]string)["k"] != "v" ||
		orig["maps"].([]map[string]any)[0]["v"] != 1.0 {
		t.Errorf("original changed through the copy: %v", orig)
	}
	if c["ptr"] != ptr {
		t.Error("pointers are shared, not copied")
	}
}

func TestHasParameter(t *testing.T) {
	t.Parallel()
	tl := searchTool()
	for name, want := range map[string]bool{"query": true, "near": true, "tags": true, "city": false, "nope": false, "": false} {
		if got := tl.HasParameter(name); got != want {
			t.Errorf("HasParameter(%q) = %v, want %v", name, got, want)
		}
	}
	if tool.MustNew(tool.Def{Name: "x"}, nil).HasParameter("x") {
		t.Error("empty schema has a parameter")
	}
	if (&tool.Tool{Name: "x", Parameters: json.RawMessage(`not json`)}).HasParameter("x") {
		t.Error("broken schema has a parameter")
	}
}

type control struct {
	cancelled int
	enqueued  []string
}

func (c *control) Cancel() { c.cancelled++ }

func (c *control) Enqueue(p tool.Priority, content ...message.Content) error {
	for _, x := range content {
		c.enqueued = append(c.enqueued, p.String()+":"+x.Text)
	}
	return nil
}

func TestRunContext(t *testing.T) {
	t.Parallel()
	var nilRC *tool.RunContext
	for _, rc := range []*tool.RunContext{nilRC, {RunID: "r"}} {
		if err := rc.Enqueue(tool.PriorityASAP, message.TextContent("hi")); !errors.Is(err, tool.ErrNoRun) {
			t.Errorf("Enqueue without a run = %v, want ErrNoRun", err)
		}
		if err := rc.Enqueue(tool.PriorityWhenIdle); err != nil {
			t.Errorf("Enqueue without content = %v, want nil", err)
		}
		rc.Cancel() // no-op, no panic
	}

	ctl := &control{}
	rc := &tool.RunContext{Control: ctl}
	if err := rc.Enqueue(tool.PriorityWhenIdle, message.TextContent("a"), message.TextContent("b")); err != nil {
		t.Fatal(err)
	}
	if err := rc.Enqueue(tool.PriorityASAP); err != nil {
		t.Fatal(err)
	}
	rc.Cancel()
	if want := []string{"when_idle:a", "when_idle:b"}; !reflect.DeepEqual(ctl.enqueued, want) || ctl.cancelled != 1 {
		t.Errorf("control saw %v, cancelled %d", ctl.enqueued, ctl.cancelled)
	}
	if tool.PriorityASAP.String() != "asap" || tool.PriorityWhenIdle.String() != "when_idle" {
		t.Error("Priority.String")
	}
}

func TestFuncRunContextAndReturn(t *testing.T) {
	t.Parallel()
	type args struct {
		N int `json:"n"`
	}
	var got *tool.RunContext
	tl := tool.Func("double", "", func(_ context.Context, rc *tool.RunContext, a args) (tool.Return, error) {
		got = rc
		if a.N < 0 {
			return tool.Return{}, tool.Fail("negative")
		}
		return tool.Return{Value: a.N * 2, Content: []message.Content{message.TextContent("done")}, Metadata: map[string]any{"n": a.N}}, nil
	})
	rc := &tool.RunContext{RunID: "r", ToolCallID: "c", ToolName: "double", Deps: 42}
	v, err := tl.Run(context.Background(), rc, json.RawMessage(`{"n":21}`))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := v.(tool.Return)
	if !ok || r.Value != 42 || r.Content[0].Text != "done" || r.Metadata["n"] != 21 || got != rc {
		t.Errorf("Run = %#v", v)
	}
	var failed *tool.ToolFailed
	if _, err := tl.Run(context.Background(), rc, json.RawMessage(`{"n":-1}`)); !errors.As(err, &failed) {
		t.Errorf("Run negative = %v", err)
	}
	var ve *tool.ValidationError
	if _, err := tl.Run(context.Background(), rc, json.RawMessage(`{"n":"x"}`)); !errors.As(err, &ve) || ve.Tool != "double" {
		t.Errorf("Run with undecodable args = %v", err)
	}
}

type typedErr struct{}

func (typedErr) Error() string     { return "remote failure" }
func (typedErr) ErrorType() string { return "CommandFailed" }

func TestErrorTypeMethodWins(t *testing.T) {
	t.Parallel()
	if got := tool.ErrorType(fmt.Errorf("call: %w", typedErr{})); got != "CommandFailed" {
		t.Fatalf("ErrorType = %q", got)
	}
}

// WithFallback offers the base's tools and the fallback's others; a name
// both offer is the base's.
func TestWithFallback(t *testing.T) {
	t.Parallel()
	base := tool.MustSet(tool.Func("a", "base a", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", nil }))
	ext, err := tool.External(tool.Def{Name: "a", Description: "external a"}, tool.Def{Name: "b", Description: "external b"})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := tool.WithFallback(base, ext).Tools(t.Context())
	if err != nil || len(tools) != 2 || tools[0].Description != "base a" || tools[1].Name != "b" {
		t.Fatalf("tools %v, %v", tools, err)
	}
}

func TestCheckOffered(t *testing.T) {
	t.Parallel()
	if err := tool.CheckOffered([]string{"a", "c"}, []string{"b", "a"}, []string{"c"}); err != nil {
		t.Fatal(err)
	}
	var no *tool.NotOfferedError
	if err := tool.CheckOffered([]string{"a", "x"}, []string{"b", "a"}); !errors.As(err, &no) || no.Name != "x" || strings.Join(no.Available, ",") != "a,b" {
		t.Fatalf("err %v", err)
	}
	if got := tool.Names([]*tool.Tool{{Name: "a"}, {Name: "b"}}); strings.Join(got, ",") != "a,b" {
		t.Fatalf("names %v", got)
	}
}
