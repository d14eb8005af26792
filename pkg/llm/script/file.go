package script

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Formats accepted by [Parse].
const (
	FormatYAML = "yaml"
	FormatJSON = "json"
)

// file is the document form of a script.
type file struct {
	Name  string `json:"name,omitempty" yaml:"name,omitempty"`
	Turns []Turn `json:"turns" yaml:"turns"`
}

// Load reads a script file: JSON for a .json file, YAML for .yaml or .yml,
// otherwise as [Parse] detects it. A script without a name is named after
// the file, without its extension. Errors wrap [ErrInvalidScript] when the
// file was read but is not a valid script.
func Load(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	format := ""
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		format = FormatJSON
	case ".yaml", ".yml":
		format = FormatYAML
	}
	f, err := parse(data, format)
	if err != nil {
		return nil, fmt.Errorf("script: load %s: %w", path, err)
	}
	if f.Name == "" {
		f.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return FromTurns(f.Name, f.Turns), nil
}

// Parse reads a script in format [FormatYAML] ("yml" is accepted too) or
// [FormatJSON]; an empty format means JSON when the data starts with "{"
// and YAML otherwise. A script without a name gets [DefaultName].
//
// Parse rejects unknown keys, a script without turns, a turn with neither
// text, tool_calls nor error, a turn with an error and anything else, tool
// names that [tool.ValidateName] refuses, duplicate call IDs within a turn
// and arguments that cannot be encoded as JSON. Its errors wrap
// [ErrInvalidScript] and name the turn (from 1) and, where known, the line.
func Parse(data []byte, format string) (*Model, error) {
	f, err := parse(data, format)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	return FromTurns(f.Name, f.Turns), nil
}

func parse(data []byte, format string) (*file, error) {
	switch strings.ToLower(format) {
	case "":
		if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
			return parseJSON(data)
		}
		return parseYAML(data)
	case FormatYAML, "yml":
		return parseYAML(data)
	case FormatJSON:
		return parseJSON(data)
	default:
		return nil, fmt.Errorf("%w: unknown format %q (want %q or %q)", ErrInvalidScript, format, FormatYAML, FormatJSON)
	}
}

// parseYAML decodes strictly (unknown keys are errors that yaml reports with
// their line), then reads the node tree again for the lines of the turns
// and calls.
func parseYAML(data []byte) (*file, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty document", ErrInvalidScript)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidScript, err)
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // it decoded above, so it parses
	turnLines, callLines, argNodes := yamlLines(&root)
	// Re-read the arguments from the nodes: decoding into any would turn
	// timestamps into time.Time and lose the text of numbers.
	for i := range f.Turns {
		for j := range f.Turns[i].ToolCalls {
			if i < len(argNodes) && j < len(argNodes[i]) && argNodes[i][j] != nil {
				v, err := yamlValue(argNodes[i][j])
				if err != nil {
					return nil, fmt.Errorf("%w: turn %d (line %d): tool call %d: args: %w", ErrInvalidScript, i+1, argNodes[i][j].Line, j+1, err)
				}
				f.Turns[i].ToolCalls[j].Args = v
			}
		}
	}
	return &f, check(&f, func(turn, call int) int {
		if call > 0 {
			if turn-1 < len(callLines) && call-1 < len(callLines[turn-1]) {
				return callLines[turn-1][call-1]
			}
			return 0
		}
		if turn-1 < len(turnLines) {
			return turnLines[turn-1]
		}
		return 0
	})
}

// yamlLines returns the line of each turn and of each tool call of each
// turn, and the args node of each call (nil when absent).
func yamlLines(root *yaml.Node) (turns []int, calls [][]int, args [][]*yaml.Node) {
	doc := root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	seq := mapValue(doc, "turns")
	if seq == nil || seq.Kind != yaml.SequenceNode {
		return nil, nil, nil
	}
	for _, t := range seq.Content {
		turns = append(turns, t.Line)
		var cl []int
		var an []*yaml.Node
		if cs := mapValue(t, "tool_calls"); cs != nil && cs.Kind == yaml.SequenceNode {
			for _, c := range cs.Content {
				cl = append(cl, c.Line)
				an = append(an, mapValue(c, "args"))
			}
		}
		calls = append(calls, cl)
		args = append(args, an)
	}
	return turns, calls, args
}

// yamlValue converts a YAML node to a JSON value: numbers keep their text
// (as json.Number), timestamps and other tagged scalars stay strings, and
// mapping keys are their scalar text.
func yamlValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return yamlValue(n.Content[0])
	case yaml.AliasNode:
		return yamlValue(n.Alias)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := yamlValue(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return nil, fmt.Errorf("line %d: keys must be plain scalars", k.Line)
			}
			v, err := yamlValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	}
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, err
		}
		return b, nil
	case "!!int", "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("line %d: %s is not a JSON number", n.Line, n.Value)
		}
		if num := json.Number(n.Value); json.Valid([]byte(num)) {
			return num, nil
		}
		// 0x1F, 0o17, 1_000 and the like: the decoded value.
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, err
		}
		return v, nil
	default:
		return n.Value, nil
	}
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// parseJSON decodes strictly, turn by turn so that errors name the turn; the
// line of a turn is found from the offset of its exact text.
func parseJSON(data []byte) (*file, error) {
	var top struct {
		Name  string            `json:"name"`
		Turns []json.RawMessage `json:"turns"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidScript, jsonErr(data, err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the script object", ErrInvalidScript)
	}
	f := &file{Name: top.Name}
	lines := make([]int, len(top.Turns))
	from := 0
	for i, raw := range top.Turns {
		if off := bytes.Index(data[from:], raw); off >= 0 {
			lines[i] = lineAt(data, from+off)
			from += off + len(raw)
		}
		var t Turn
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		d.UseNumber() // keep numbers in args exactly as written
		if err := d.Decode(&t); err != nil {
			return nil, fmt.Errorf("%w: turn %d%s: %w", ErrInvalidScript, i+1, lineSuffix(lines[i]), err)
		}
		f.Turns = append(f.Turns, t)
	}
	return f, check(f, func(turn, call int) int {
		if call > 0 {
			return 0
		}
		return lines[turn-1]
	})
}

// jsonErr adds the line to a JSON syntax or type error.
func jsonErr(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("line %d: %w", lineAt(data, int(se.Offset)), err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("line %d: %w", lineAt(data, int(te.Offset)), err)
	}
	return err
}

func lineAt(data []byte, off int) int {
	off = min(max(off, 0), len(data))
	return 1 + bytes.Count(data[:off], []byte("\n"))
}

func lineSuffix(line int) string {
	if line <= 0 {
		return ""
	}
	return fmt.Sprintf(" (line %d)", line)
}

// check validates the decoded script; line(turn, call) returns the line of
// a turn (call 0) or of one of its calls (from 1), or 0 when unknown.
func check(f *file, line func(turn, call int) int) error {
	if len(f.Turns) == 0 {
		return fmt.Errorf("%w: no turns", ErrInvalidScript)
	}
	for i, t := range f.Turns {
		n := i + 1
		if _, err := render(n, t, 0); err != nil {
			l := line(n, 0)
			var ce *callError
			if errors.As(err, &ce) && line(n, ce.call) > 0 {
				l = line(n, ce.call)
			}
			return fmt.Errorf("%w: turn %d%s: %w", ErrInvalidScript, n, lineSuffix(l), err)
		}
	}
	return nil
}
