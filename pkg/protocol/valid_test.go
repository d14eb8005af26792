package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

var validSeeds = []string{
	``, ` `, `{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5e-3, -0, true, false, null, "x\u00e9\n"]} `,
	`{"a":{"b":{"c":[[],{}]}}}`, `"s"`, `0`, `-`, `-01`, `1.`, `1.e3`, `1e`, `1e+`, `1E+9`, `.5`,
	`tru`, `truex`, `nul`, `[1,]`, `{,}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `[1 2]`,
	`"\x"`, `"\u12"`, `"\u12G4"`, "\"\x01\"", "\"\x7f\xff\"", `"\/\b\f\r\t\\\""`, `{"a":1}}`, `[[]`,
	"\v{}", "{}\f", `{"a":"b"` + "\n}", `[` + "\u00a0" + `]`, `{"":""}`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

func TestValidJSON(t *testing.T) {
	for _, s := range validSeeds {
		if got, want := validJSON([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("validJSON(%.40q) = %v, json.Valid says %v", s, got, want)
		}
	}
}

// FuzzValidJSON checks that validJSON answers what json.Valid answers.
func FuzzValidJSON(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	task := []byte(`{"task_id":"01JDQ3Z8Y0K3X7M2V9Q4R5T6W7","tool":"lookup","args":{"query":"the quick brown fox jumps over the lazy dog","limit":10,"filters":["a","b","c"],"deep":{"x":1.5e3,"y":null,"z":true}},"conversation_id":"01JDQ3Z8Y0K3X7M2V9Q4R5T6W8","tool_call_id":"call_1","mode":"inline","attempt":1,"deadline":"2026-11-30T16:00:00Z"}`)
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(task)))
		for b.Loop() {
			validJSON(task)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(task)))
		for b.Loop() {
			json.Valid(task)
		}
	})
}
