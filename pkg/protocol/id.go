package protocol

import (
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"
)

// ErrInvalidID is wrapped by errors about a task or conversation ID that is
// not a ULID in canonical form.
var ErrInvalidID = errors.New("protocol: invalid ID")

// NewID returns a new ULID in canonical form (26 upper-case Crockford base32
// characters). IDs made by one process sort in creation order.
func NewID() string { return ulid.Make().String() }

// ParseID parses a task or conversation ID. The ID must be a ULID in canonical
// form: 26 characters, upper case, as produced by [NewID], because subject
// tokens are case-sensitive. The error wraps [ErrInvalidID].
func ParseID(s string) (ulid.ULID, error) {
	id, err := ulid.ParseStrict(s)
	if err != nil {
		return ulid.ULID{}, fmt.Errorf("%w %q: %w", ErrInvalidID, s, err)
	}
	if id.String() != s {
		return ulid.ULID{}, fmt.Errorf("%w %q: not in canonical upper-case form (%s)", ErrInvalidID, s, id)
	}
	return id, nil
}
