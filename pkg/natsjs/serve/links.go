package serve

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// The signed approve/deny links of SPEC §12: single-use tokens signed by
// the service (the HMAC key in the store, convstore.Links), bound to a
// conversation, a task, the call's args_digest, an action and an expiry,
// and naming their recipient (the decision's by). A link is
// <base64url(claims JSON)>.<base64url(HMAC-SHA256(key, first part))>.

// LinkClaims are what a signed link binds.
type LinkClaims struct {
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

// Errors of [VerifyLink].
var (
	ErrLinkInvalid = errors.New("serve: the link is not one of this service's")
	ErrLinkExpired = errors.New("serve: the link has expired")
)

// SignLink returns the link token of c signed with key.
func SignLink(key []byte, c LinkClaims) string {
	raw, _ := json.Marshal(c) // plain strings and a number: cannot fail
	body := base64.RawURLEncoding.EncodeToString(raw)
	return body + "." + base64.RawURLEncoding.EncodeToString(linkMAC(key, body))
}

// VerifyLink returns the claims of token when key signed it and it has not
// expired at now.
func VerifyLink(key []byte, token string, now time.Time) (LinkClaims, error) {
	body, sig, ok := strings.Cut(token, ".")
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil || !hmac.Equal(mac, linkMAC(key, body)) {
		return LinkClaims{}, ErrLinkInvalid
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	var c LinkClaims
	if err != nil || json.Unmarshal(raw, &c) != nil || c.ID == "" || (c.Action != "approve" && c.Action != "deny") {
		return LinkClaims{}, ErrLinkInvalid
	}
	if now.Unix() >= c.Expires {
		return c, ErrLinkExpired
	}
	return c, nil
}

func linkMAC(key []byte, body string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("offload link\n" + body))
	return m.Sum(nil)
}
