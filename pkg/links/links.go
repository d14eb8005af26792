// Package links signs and verifies the single-use approve and deny links
// of SPEC §12: tokens signed by the service (the HMAC key kept in the
// store, natsjs/convstore.Links), bound to a conversation, a task, the
// call's args_digest, an action and an expiry, and naming their
// recipient (the decision's by). The web inbox makes and serves them; the
// notifier puts them in its notifications.
package links

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// A link is <base64url(claims JSON)>.<base64url(HMAC-SHA256(key, first part))>.

// Claims are what a signed link binds.
type Claims struct {
	// ID identifies the link (a ULID): used once.
	ID string `json:"id"`
	// Conversation, Task and Digest name the call and its arguments.
	Conversation string `json:"c"`
	Task         string `json:"t"`
	Digest       string `json:"d"`
	// Action is "approve" or "deny".
	Action string `json:"a"`
	// Expires is the link's end, in Unix seconds.
	Expires int64 `json:"e"`
	// To is the recipient's label: the decision's by.
	To string `json:"to"`
}

// Errors of [Verify].
var (
	ErrInvalid = errors.New("links: the link is not one of this service's")
	ErrExpired = errors.New("links: the link has expired")
)

// Sign returns the link token of c signed with key.
func Sign(key []byte, c Claims) string {
	raw, _ := json.Marshal(c) // plain strings and a number: cannot fail
	body := base64.RawURLEncoding.EncodeToString(raw)
	return body + "." + base64.RawURLEncoding.EncodeToString(mac(key, body))
}

// Verify returns the claims of token when key signed it and it has not
// expired at now.
func Verify(key []byte, token string, now time.Time) (Claims, error) {
	body, sig, ok := strings.Cut(token, ".")
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil || !hmac.Equal(got, mac(key, body)) {
		return Claims{}, ErrInvalid
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	var c Claims
	if err != nil || json.Unmarshal(raw, &c) != nil || c.ID == "" || (c.Action != "approve" && c.Action != "deny") {
		return Claims{}, ErrInvalid
	}
	if now.Unix() >= c.Expires {
		return c, ErrExpired
	}
	return c, nil
}

func mac(key []byte, body string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("offload link\n" + body))
	return m.Sum(nil)
}

// ErrUsed is returned by [Store.Use] for a link used before.
var ErrUsed = errors.New("links: the link was used already")

// Store keeps the service's signing key and the links used
// (natsjs/convstore.Links, in the store shared by every replica).
type Store interface {
	// Key returns the signing key, created on first use.
	Key(ctx context.Context) ([]byte, error)
	// Use records that link id is used: ErrUsed when it was before.
	Use(ctx context.Context, id string) error
}
