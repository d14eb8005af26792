package convstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/protocol"
)

// SignatureHeader is the header of a decision the service signed (SPEC
// §12): the hex HMAC-SHA256, with the service's key, of its
// conversation, task, args_digest, approval and by (see
// [Identities.Sign]).
const SignatureHeader = "Offload-Decision-Signature"

// Identities authenticates the approvals of calls that need a quorum
// (SPEC §12): a decision's by is only what its publisher claims, so it
// counts as an identity when the service signed the decision with its
// key (the inbox's and the API's decisions, by the token's name), or, with
// TrustBy (agent serve --trust-nats-by), always. Set its fields before
// the inbox or the publisher that holds it is used; nil authenticates
// none.
type Identities struct {
	// Key is the service's HMAC key (Links.Key); nil signs nothing.
	Key []byte
	// TrustBy takes every decision's by as its identity.
	TrustBy bool
}

// Sign returns the signature of d for task of conversation conv, "" when
// there is no key, and for a decision given by a signed link (channel
// link): its by is the recipient label whoever made the link chose, so
// one approver could name as many approvers as links.
func (ids *Identities) Sign(conv, task string, d protocol.Decision) string {
	if ids == nil || len(ids.Key) == 0 || d.Channel == protocol.ChannelLink {
		return ""
	}
	m := hmac.New(sha256.New, ids.Key)
	for _, s := range []string{"offload.decision", conv, task, d.ArgsDigest, strconv.FormatBool(d.Approved), d.By} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

// Identify returns d's authenticated identity, given the signature sig
// it carried ("" for none), for task of conversation conv.
func (ids *Identities) Identify(conv, task string, d protocol.Decision, sig string) (string, bool) {
	switch {
	case ids == nil || d.By == "":
		return "", false
	case ids.TrustBy:
		return d.By, true
	case sig != "" && len(ids.Key) > 0 && hmac.Equal([]byte(sig), []byte(ids.Sign(conv, task, d))):
		return d.By, true
	}
	return "", false
}

// identify is the conversation.AdmitOptions.Identify of a message with
// headers h for task of conversation conv; nil when ids is.
func (ids *Identities) identify(conv, task string, h nats.Header) func(protocol.Decision) (string, bool) {
	if ids == nil {
		return nil
	}
	return func(d protocol.Decision) (string, bool) { return ids.Identify(conv, task, d, h.Get(SignatureHeader)) }
}
