package pending

import (
	"encoding/json"
	"regexp"
	"strings"
)

// The schema library's wording of a failed check, said as a person
// reading the inbox (or the API's 422) wants it: the field named by its
// path, what it must be. The model is given the library's own wording
// (tool.ValidationError), which it handles as well.
var (
	// validatingAt is one step of the library's path: "validating /properties/a/properties/b: ".
	validatingAt = regexp.MustCompile(`validating (/[^:]*|root): `)
	wrongType    = regexp.MustCompile(`^type: (.*) has type "(\w+)", want "(\w+)"$`)
	missing      = regexp.MustCompile(`^required: missing properties: (\[.*\])$`)
	unexpected   = regexp.MustCompile(`^unexpected additional properties (\[.*\])$`)
)

// argsMessage returns msg, a check's failure as the schema library words
// it, in a person's words: "target: must be a string, not an integer
// (5)"; a message it does not know is returned without the library's
// path prefixes.
func argsMessage(msg string) string {
	field := ""
	for {
		loc := validatingAt.FindStringSubmatchIndex(msg)
		if loc == nil || loc[0] != 0 {
			break
		}
		if p := msg[loc[2]:loc[3]]; p != "root" {
			field = strings.TrimPrefix(strings.ReplaceAll(p, "/properties/", "."), ".")
		}
		msg = msg[loc[1]:]
	}
	switch {
	case wrongType.MatchString(msg):
		m := wrongType.FindStringSubmatch(msg)
		msg = "must be " + article(m[3]) + ", not " + article(m[2]) + " (" + m[1] + ")"
	case missing.MatchString(msg):
		names := list(missing.FindStringSubmatch(msg)[1])
		return prefixed(field, names+" "+isAre(names)+" required")
	case unexpected.MatchString(msg):
		names := list(unexpected.FindStringSubmatch(msg)[1])
		return prefixed(field, names+" "+isAre(names)+" not among the tool's arguments")
	}
	return prefixed(field, msg)
}

// prefixed is msg about field ("" the arguments as a whole).
func prefixed(field, msg string) string {
	if field == "" {
		return msg
	}
	return field + ": " + msg
}

// article is a JSON type's name with its article: "an integer", "a string".
func article(typ string) string {
	if strings.ContainsRune("aeiou", rune(typ[0])) {
		return "an " + typ
	}
	return "a " + typ
}

// list returns the names of a JSON array of strings joined with commas
// (the text as it is when it is not one).
func list(arr string) string {
	var names []string
	if json.Unmarshal([]byte(arr), &names) != nil || len(names) == 0 {
		return arr
	}
	return strings.Join(names, ", ")
}

// isAre is the verb of a list of one name or more.
func isAre(names string) string {
	if strings.Contains(names, ", ") {
		return "are"
	}
	return "is"
}
