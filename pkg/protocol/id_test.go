package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestNewIDParses(t *testing.T) {
	t.Parallel()
	a, b := NewID(), NewID()
	if a == b {
		t.Fatalf("NewID returned %q twice", a)
	}
	if a >= b {
		t.Errorf("IDs not increasing: %q then %q", a, b)
	}
	id, err := ParseID(a)
	if err != nil {
		t.Fatalf("ParseID(%q): %v", a, err)
	}
	if id.String() != a {
		t.Errorf("round trip: got %q, want %q", id, a)
	}
}

func TestParseIDErrors(t *testing.T) {
	t.Parallel()
	valid := NewID()
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "bad data size"},
		{"short", valid[:25], "bad data size"},
		{"lower case", strings.ToLower(valid), "canonical"},
		{"bad character", "0123456789ABCDEFGHJKMNPQRU", "bad data characters"},
		{"overflow", "ZZZZZZZZZZZZZZZZZZZZZZZZZZ", "overflow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseID(tc.in)
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ParseID(%q) = %v, want ErrInvalidID", tc.in, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
