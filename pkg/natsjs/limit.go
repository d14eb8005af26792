package natsjs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/metrics"
)

// The limits a stream refuses a publish at: the limit label of
// offload_publish_refused_total (SPEC §7), named as the stream
// definitions' fields (jetstream/streams/*.json).
const (
	// LimitMsgSize: the message is larger than the stream's max_msg_size.
	LimitMsgSize = "max_msg_size"
	// LimitBytes: the stream holds max_bytes (discard new).
	LimitBytes = "max_bytes"
	// LimitMsgs: the stream holds max_msgs (discard new).
	LimitMsgs = "max_msgs"
	// LimitMsgsPerSubject: the subject holds max_msgs_per_subject
	// (discard new per subject).
	LimitMsgsPerSubject = "max_msgs_per_subject"
	// LimitStorage: the server (or the account) has no storage left.
	LimitStorage = "storage"
)

// LimitError is a publish a stream refused at one of its limits (or the
// server for lack of storage): nothing was stored. It wraps
// [ErrLimitReached] and the server's error.
type LimitError struct {
	// Limit is one of the LimitXxx names.
	Limit string
	// Description is the server's description of the refusal.
	Description string
	// Err is the server's error.
	Err error
}

// ErrLimitReached is wrapped by every [*LimitError].
var ErrLimitReached = errors.New("natsjs: a stream limit refused the message")

// Error implements error.
func (e *LimitError) Error() string {
	return fmt.Sprintf("refused by the stream's %s limit (%s): nothing was stored", e.Limit, e.Description)
}

// Unwrap returns ErrLimitReached and the server's error.
func (e *LimitError) Unwrap() []error { return []error{ErrLimitReached, e.Err} }

// CountRefusal returns err as [Limited] does and, when it is a
// *LimitError, counts it in am as a refusal of stream (a nil am counts
// nothing).
func CountRefusal(am *metrics.Agent, stream string, err error) error {
	err = Limited(err)
	var le *LimitError
	if errors.As(err, &le) {
		am.PublishRefused(stream, le.Limit)
	}
	return err
}

// The server's error codes of the refusals at a limit.
const (
	codeMsgSize       = jetstream.JSErrCodeStreamMessageExceedsMaximum // 10054
	codeInsufficient  = 10023                                          // JSInsufficientResourcesErr
	codeStorageLimit  = 10047                                          // JSStorageResourcesExceededErr
	descBytes         = "maximum bytes exceeded"
	descMsgsPerSubj   = "maximum messages per subject exceeded"
	descMsgs          = "maximum messages exceeded"
	descStorageExceed = "resource limits exceeded"
)

// Limited returns err as a [*LimitError] when it is a publish's refusal
// at a stream limit (maximum message size, bytes, messages, messages per
// subject) or for lack of storage, else err unchanged.
func Limited(err error) error {
	var je jetstream.JetStreamError
	if err == nil || !errors.As(err, &je) || je.APIError() == nil {
		return err
	}
	api := je.APIError()
	desc := strings.ToLower(api.Description)
	limit := ""
	switch {
	case api.ErrorCode == codeMsgSize:
		limit = LimitMsgSize
	case strings.Contains(desc, descMsgsPerSubj):
		limit = LimitMsgsPerSubject
	case strings.Contains(desc, descBytes):
		limit = LimitBytes
	case strings.Contains(desc, descMsgs):
		limit = LimitMsgs
	case api.ErrorCode == codeInsufficient || api.ErrorCode == codeStorageLimit || strings.Contains(desc, descStorageExceed):
		limit = LimitStorage
	}
	if limit == "" {
		return err
	}
	return &LimitError{Limit: limit, Description: api.Description, Err: err}
}
