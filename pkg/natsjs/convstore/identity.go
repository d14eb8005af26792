package convstore

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/protocol"
)

// SignatureHeader is the header of a decision (SPEC §12) or an answer
// (SPEC §21) the service signed: "ed25519:" and the base64 Ed25519
// signature, with the private half of the service's decision key, of
// the message's kind, conversation, task and whole payload (see
// [Identities.Sign], [Identities.SignAnswer]).
const SignatureHeader = "Offload-Decision-Signature"

// sigPrefix names the signature's scheme in [SignatureHeader].
const sigPrefix = "ed25519:"

// sourceHeader is the header the server gives a message a stream stored
// from one of its sources (a client may not set it): on the decisions
// stream, a timeout written by the expiries stream.
const sourceHeader = "Nats-Stream-Source"

// Identities signs the decisions the service's faces publish and
// verifies them where they are read (SPEC §12). A decision's by and
// channel are only what its publisher claims, unless the service signed
// it: agent serve, which authenticated the person (a token, a signed
// link), signs with the private half of its decision key (readable by
// the serve role alone); every agent process verifies with the public
// half (readable by the agent role), so that it can count the
// approvals of a quorum given in serve's inbox without being able to
// forge one. A signed decision's arrival is Verified; the by of a signed
// decision given over the inbox or the API is the identity of a quorum
// vote (a signed link's by is the label whoever made the link chose, so
// it counts for no quorum); with TrustBy (agent serve --trust-nats-by)
// every decision's by counts. Set its fields before the inbox or the
// publisher that holds it is used; nil verifies and signs nothing.
type Identities struct {
	// Private signs (agent serve); nil signs nothing.
	Private ed25519.PrivateKey
	// Public verifies; nil verifies nothing, unless Private is set (its
	// public half is used then).
	Public ed25519.PublicKey
	// TrustBy takes every decision's by as its quorum identity.
	TrustBy bool
}

// public returns the key that verifies, nil for none.
func (ids *Identities) public() ed25519.PublicKey {
	switch {
	case ids == nil:
		return nil
	case len(ids.Public) == ed25519.PublicKeySize:
		return ids.Public
	case len(ids.Private) == ed25519.PrivateKeySize:
		pub, _ := ids.Private.Public().(ed25519.PublicKey)
		return pub
	}
	return nil
}

// signed returns what is signed of data, a decision or an answer
// (kind), for task of conversation conv: the kind is signed, so that
// the signature of one is never valid for the other.
func signed(kind conversation.ArrivalKind, conv, task string, data []byte) []byte {
	domain := "offload.decision"
	if kind == conversation.ArrivalAnswer {
		domain = "offload.answer"
	}
	return append([]byte(domain+"\x00"+conv+"\x00"+task+"\x00"), data...)
}

// Sign returns the signature header's value of decision data (its whole
// payload, as published) for task of conversation conv: "" without a
// private key.
func (ids *Identities) Sign(conv, task string, data []byte) string {
	return ids.sign(conversation.ArrivalDecision, conv, task, data)
}

// SignAnswer returns the signature header's value of answer data (its
// whole payload, as published) for external call task of conversation
// conv (SPEC §21): "" without a private key. Its by and channel are
// then the service's, not only its publisher's claim.
func (ids *Identities) SignAnswer(conv, task string, data []byte) string {
	return ids.sign(conversation.ArrivalAnswer, conv, task, data)
}

func (ids *Identities) sign(kind conversation.ArrivalKind, conv, task string, data []byte) string {
	if ids == nil || len(ids.Private) != ed25519.PrivateKeySize {
		return ""
	}
	return sigPrefix + base64.StdEncoding.EncodeToString(ed25519.Sign(ids.Private, signed(kind, conv, task, data)))
}

// Verify reports whether sig, a signature header's value, is the
// service's signature of decision data for task of conversation conv.
func (ids *Identities) Verify(conv, task string, data []byte, sig string) bool {
	return ids.verify(conversation.ArrivalDecision, conv, task, data, sig)
}

// VerifyAnswer reports whether sig, a signature header's value, is the
// service's signature of answer data for task of conversation conv.
func (ids *Identities) VerifyAnswer(conv, task string, data []byte, sig string) bool {
	return ids.verify(conversation.ArrivalAnswer, conv, task, data, sig)
}

func (ids *Identities) verify(kind conversation.ArrivalKind, conv, task string, data []byte, sig string) bool {
	pub := ids.public()
	raw, ok := strings.CutPrefix(sig, sigPrefix)
	if pub == nil || !ok {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	return err == nil && ed25519.Verify(pub, signed(kind, conv, task, data), b)
}

// Identify returns the quorum identity of decision d, verified when the
// service's signature of it is valid: its by with TrustBy, or when it is
// verified and was not given by a signed link.
func (ids *Identities) Identify(d protocol.Decision, verified bool) (string, bool) {
	switch {
	case ids == nil || d.By == "":
		return "", false
	case ids.TrustBy:
		return d.By, true
	case verified && d.Channel != protocol.ChannelLink:
		return d.By, true
	}
	return "", false
}

// VoteKey returns the key under which an approval by by of task of
// conversation conv is published beside the others of a quorum (its
// Nats-Msg-Id: [Publisher.PublishVote]): for the service, which signs,
// a digest of its signature of (conv, task, by), the same for every
// approval of that identity (the second within the duplicate window is
// refused duplicate_identity) and that no one without the private key
// can publish first to squat it; without a private key, "by.<by>".
func (ids *Identities) VoteKey(conv, task, by string) string {
	if ids == nil || len(ids.Private) != ed25519.PrivateKeySize {
		return "by." + by
	}
	sig := ed25519.Sign(ids.Private, []byte("offload.vote\x00"+conv+"\x00"+task+"\x00"+by))
	sum := sha256.Sum256(sig)
	return "sig." + hex.EncodeToString(sum[:16])
}

// admitOptions returns the conversation.AdmitOptions of data, a
// decision or an answer (kind), read with headers h for task of
// conversation conv: whether it is signed, a decision's quorum
// identity, and whether the expiries stream wrote it.
func (ids *Identities) admitOptions(kind conversation.ArrivalKind, conv, task string, data []byte, h nats.Header) conversation.AdmitOptions {
	verified := ids.verify(kind, conv, task, data, h.Get(SignatureHeader))
	if kind == conversation.ArrivalAnswer {
		return conversation.AdmitOptions{Signed: verified}
	}
	o := conversation.AdmitOptions{Signed: verified, Expiry: h.Get(sourceHeader) != ""}
	if ids != nil {
		o.Identify = func(d protocol.Decision) (string, bool) { return ids.Identify(d, verified) }
	}
	return o
}
