package web

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The metadata keys of an MCP server's elicitation (SPEC §16), as the
// worker defers the call with them: what the server asks, and the URL
// to open in URL mode.
const (
	metaElicitation = "mcp.elicitation"
	metaURL         = "mcp.url"
)

// fieldPrefix names a form field of an elicitation's requested schema:
// f.<property>.
const fieldPrefix = "f."

// asks is what an external call's server asks a person (an MCP
// elicitation): its message, and either a URL to open or the fields of a
// form made from its requested schema, whose answer is the content.
type asks struct {
	Message string
	URL     string // an http(s) URL to open (URL mode), else ""
	Fields  []askField
}

// askField is one property of a requested schema as a form field. MCP
// restricts a requested schema to a flat object of primitive properties:
// a string (with a format, or one of an enum: enum with enumNames, or
// oneOf of const and title), a number, an integer, a boolean, or an array
// of strings chosen among an enum (items.enum, or items.anyOf of const and
// title).
type askField struct {
	Name, Title, Description string
	// Type is the property's: string, number, integer, boolean or array
	// (a multiple choice).
	Type, Format string
	Required     bool
	// Options are the values a choice offers (a select), Multiple whether
	// several may be chosen (an array).
	Options  []askOption
	Multiple bool
	// Value is the field's value as the form shows it: the schema's
	// default, or what a refused form sent (Values for a multiple choice).
	Value  string
	Values []string
}

// askOption is a value a choice offers, and its label.
type askOption struct{ Value, Label string }

// Selected reports whether f shows o chosen.
func (f askField) Selected(o askOption) bool {
	if f.Multiple {
		return slices.Contains(f.Values, o.Value)
	}
	return f.Value == o.Value
}

// offers reports whether v is among f's choices.
func (f askField) offers(v string) bool {
	return slices.ContainsFunc(f.Options, func(o askOption) bool { return o.Value == v })
}

// Input is the HTML input type of a field that is no choice (a checkbox
// for a boolean: see the card template).
func (f askField) Input() string {
	switch f.Type {
	case "number", "integer":
		return "number"
	case "boolean":
		return "checkbox"
	}
	switch f.Format {
	case "email":
		return "email"
	case "uri":
		return "url"
	case "date":
		return "date"
	}
	return "text"
}

// Step is the number input's step: 1 for an integer, any for a number.
func (f askField) Step() string {
	if f.Type == "integer" {
		return "1"
	}
	return "any"
}

// asksOf reads an external call's metadata: nil when no server asks
// through it (any other external call keeps the generic answer field). A
// requested schema with a property no form field can give (an object, an
// array) is shown without fields: the generic answer field takes its JSON.
func asksOf(md map[string]any) *asks {
	e, ok := md[metaElicitation].(map[string]any)
	if !ok {
		return nil
	}
	a := &asks{}
	a.Message, _ = e["message"].(string)
	if u, _ := md[metaURL].(string); u != "" {
		if p, err := url.Parse(u); err == nil && (p.Scheme == "https" || p.Scheme == "http") && p.Host != "" {
			a.URL = p.String()
		}
		return a
	}
	schema, _ := e["requestedSchema"].(map[string]any)
	fields, ok := fieldsOf(schema)
	if !ok {
		return a
	}
	a.Fields = fields
	return a
}

// fieldsOf returns the form fields of a requested schema, sorted by name;
// false when a property is of a type no field gives.
func fieldsOf(schema map[string]any) ([]askField, bool) {
	props, _ := schema["properties"].(map[string]any)
	if len(props) == 0 {
		return nil, false
	}
	required := map[string]bool{}
	if rs, ok := schema["required"].([]any); ok {
		for _, r := range rs {
			if n, ok := r.(string); ok {
				required[n] = true
			}
		}
	}
	out := make([]askField, 0, len(props))
	for name, p := range props {
		prop, _ := p.(map[string]any)
		f := askField{Name: name, Required: required[name]}
		f.Type, _ = prop["type"].(string)
		f.Format, _ = prop["format"].(string)
		f.Title, _ = prop["title"].(string)
		f.Description, _ = prop["description"].(string)
		switch f.Type {
		case "string":
			f.Options = optionsOf(prop)
		case "number", "integer", "boolean":
		case "array":
			items, _ := prop["items"].(map[string]any)
			f.Options, f.Multiple = optionsOf(items), true
			if len(f.Options) == 0 {
				return nil, false
			}
		default:
			return nil, false
		}
		switch d := prop["default"].(type) {
		case nil:
		case []any:
			for _, v := range d {
				f.Values = append(f.Values, fmt.Sprint(v))
			}
		default:
			f.Value = fmt.Sprint(d)
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b askField) int { return strings.Compare(a.Name, b.Name) })
	return out, true
}

// optionsOf returns the choices a property (or an array's items) offers:
// its enum (labelled by enumNames when they match), or its oneOf / anyOf
// of const and title; nil when it offers none.
func optionsOf(prop map[string]any) []askOption {
	var out []askOption
	if en, ok := prop["enum"].([]any); ok {
		names, _ := prop["enumNames"].([]any)
		for i, v := range en {
			s, ok := v.(string)
			if !ok {
				continue
			}
			o := askOption{Value: s, Label: s}
			if len(names) == len(en) {
				if n, ok := names[i].(string); ok {
					o.Label = n
				}
			}
			out = append(out, o)
		}
		return out
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		alts, _ := prop[k].([]any)
		for _, a := range alts {
			m, _ := a.(map[string]any)
			c, ok := m["const"].(string)
			if !ok {
				continue
			}
			t, _ := m["title"].(string)
			out = append(out, askOption{Value: c, Label: cmp.Or(t, c)})
		}
	}
	return out
}

// contentOf builds an elicitation's answer (the result's content, SPEC
// §16: the accepted form's values) from a form's fields (f.<name>), typed
// as the schema says: a checkbox sent is true and one not sent false, a
// number parsed, an empty optional field left out. It returns the values
// as sent, for the form shown again, and a person's error (a required
// field empty, a number that is none, a value not among an enum's).
func contentOf(fields []askField, form url.Values) (json.RawMessage, []askField, error) {
	content := map[string]any{}
	sent := slices.Clone(fields)
	var problems []string
	for i, f := range fields {
		v := strings.TrimSpace(form.Get(fieldPrefix + f.Name))
		sent[i].Value = v
		label := cmp.Or(f.Title, f.Name)
		if f.Multiple {
			vs := form[fieldPrefix+f.Name]
			sent[i].Values = vs
			chosen := []string{}
			for _, v := range vs {
				if !f.offers(v) {
					problems = append(problems, label+": "+v+" is not offered")
					continue
				}
				chosen = append(chosen, v)
			}
			if len(chosen) == 0 && f.Required {
				problems = append(problems, label+" is required")
			} else if len(chosen) > 0 {
				content[f.Name] = chosen
			}
			continue
		}
		switch {
		case f.Type == "boolean":
			content[f.Name] = v != ""
			sent[i].Value = strconv.FormatBool(v != "")
		case v == "" && f.Required:
			problems = append(problems, label+" is required")
		case v == "":
		case f.Type == "number":
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				problems = append(problems, label+" is not a number")
				continue
			}
			content[f.Name] = n
		case f.Type == "integer":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				problems = append(problems, label+" is not a whole number")
				continue
			}
			content[f.Name] = n
		case len(f.Options) > 0 && !f.offers(v):
			problems = append(problems, label+": "+v+" is not offered")
		default:
			content[f.Name] = v
		}
	}
	if len(problems) > 0 {
		return nil, sent, formError(problems)
	}
	raw, err := json.Marshal(content)
	return raw, sent, err
}

// formError is what a person must mend in an elicitation's form, one
// problem per field, shown at the card as a sentence.
type formError []string

// Error implements error.
func (e formError) Error() string { return strings.Join(e, "; ") + "." }
